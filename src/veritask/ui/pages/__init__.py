"""The UI's pages, one module per area; each calls ``services`` and renders a template."""
