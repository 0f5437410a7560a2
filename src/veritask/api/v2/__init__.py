"""``/api/v2``: the fine-grained states of docs/state-machine.md."""
