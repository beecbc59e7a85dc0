"""The job layer: a run's whole config (``run_config``), its YAML loading and overrides (``loader``), the
rollout stack built from it (``stack``: engine, env factory, dataset, buffer, orchestrator) and its run
directory (``rundir``). It sits above every plug-in area (engines, envs, algorithms, rollout) and below the
trainer and the command line.
"""
