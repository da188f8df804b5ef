"""Environment checks (ENV): the installed torch can use the machine's GPUs. The full environment report
(packages, env vars, CPU, RAM) is `llmdoctor triage`'s job (probes/environment.py)."""
from __future__ import annotations

from checks.catalogue.registry import Problem, check


@check("ENV001", category="environment", severity="warning", needs=(),
       hint="Install the torch build for this driver and GPU generation (pip index-url of the matching CUDA "
            "version), or upgrade the driver; `llmdoctor triage` collects the versions for a ticket.")
def torch_matches_gpus(ctx):
    """torch can use the GPUs NVML sees: a CUDA build, a new enough driver, and kernels for their compute capability.

    Catches the three environment failures behind "Torch not compiled with CUDA enabled" / a silent
    CPU-only run, "The NVIDIA driver on your system is too old" (the driver's CUDA version is older than
    the one torch was built for), and "no kernel image is available for execution on the device" (the
    GPU's sm_XY is missing from torch.cuda.get_arch_list()). Passes on machines without NVIDIA GPUs.
    """
    import torch

    from probes.environment import environment_problems, torch_info
    from probes.gpu_state import NvmlSession
    with NvmlSession() as session:
        nvml = session.snapshot().as_dict()
    env = {"torch": torch_info(torch), "nvml": nvml}
    for problem in environment_problems(env):
        yield Problem(problem, evidence={"torch": env["torch"], "driver": nvml.get("system", {}),
                                         "nvml_gpus": [g.get("name") for g in nvml.get("gpus", [])]})
