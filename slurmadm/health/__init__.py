"""GPU node health checks for prolog, epilog and HealthCheckProgram (see hook.py, engine.py).

Kept import-free: the prolog path imports only the modules it uses.
"""
