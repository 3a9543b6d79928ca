"""How a run is drawn, shared by the two places that draw it: the terminal renderers
(cli/diagram.py, timeline.py, durable_diagram.py) and the dashboard (api/ui/). Each
status's glyph (glyphs.py), a DAG's columns by longest path (layers.py), a step's
attempts as segments of time (attempt_segments.py) and what a step was sent
(step_inputs.py). Pure, like the engine, but no run
decision depends on it: it sits below the API and above the runtime in the import
contracts, so nothing that runs a workflow can import it, and it reads no store."""
