"""The run report: a document of sections (document.py, sections.py) rendered as HTML and
Markdown that show every name as text (render.py), and the RunReport step (run_report.py)."""
import trainer_module  # noqa: F401  Sets TF_USE_LEGACY_KERAS before TensorFlow loads.
