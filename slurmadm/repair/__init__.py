"""Repair: every hardware fault followed from its first signal to a node back in service
(issue 34). Incidents kept by part (`incidents.py`, `model.py`), their classes (`classes.py`)
and the ladder of steps per class (`ladder.py`), all as data with sources (`data/`).

Nothing is imported here: the health hook and the exporter import single modules."""
