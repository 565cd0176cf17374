"""Settings for the whole suite.

Hypothesis' `too_slow` health check judges a test by the wall time its input generation takes, which on a shared
two-core machine says more about the machine's load than about the test (a conversion test generated 3 inputs in
43 s at load 17). The suite has no timed assertions (performance is measured in bench/),
so the time-based health check is off; every other health check stays on.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("admitd", suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("admitd")
