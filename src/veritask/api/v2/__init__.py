"""``/api/v2``: the fine-grained states of design.md section 3."""
