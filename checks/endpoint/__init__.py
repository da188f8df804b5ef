"""The EPT family: a live inference server compared with the reference engine on the same model.

These checks need "endpoint": `llmdoctor probe endpoint` and `llmdoctor triage --endpoint` run them on an
EndpointInputs (checks/endpoint/inputs.py); `llmdoctor check` leaves them out. Importing this package
registers them; the load checks (EPT101+) live in load/."""
from checks.endpoint import chain, load, numerics, prompt_ids, reach, settings, stopping  # noqa: F401 (registers)
