"""Text summaries of the model's plans, one module per `harness model` calculator: `render_text(plan record) -> str`.

The CLI verbs (harness/cli/model/) only load the scenario, call the model and print one of these (or the JSON)."""
