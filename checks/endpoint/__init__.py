"""The EPT family: a live inference server compared with the reference engine on the same model.

These checks need "endpoint": `llmdoctor probe endpoint` and `llmdoctor triage --endpoint` run them on an
EndpointContext (checks/endpoint/context.py); `llmdoctor check` leaves them out. Importing this package
registers them."""
from checks.endpoint import (load, load_answers, numerics, prompt_ids, reach, settings,  # noqa: F401 (registers)
                             stopping)
