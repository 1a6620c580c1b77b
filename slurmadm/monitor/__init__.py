"""`slurmadm monitor`: alert rules (`rules.py`) and a Grafana dashboard (`dashboard.py`) generated
from the site, the Alertmanager webhook that isolates nodes (`webhook.py`), and a real
Prometheus + Alertmanager stack on the dev cluster (`stack.py`)."""
