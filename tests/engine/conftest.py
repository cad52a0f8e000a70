import os

from hypothesis import HealthCheck, settings

# CI replays the same examples every run (failures reproduce); local runs explore new ones.
settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") == "true" else os.environ.get("HYPOTHESIS_PROFILE", "dev"))
