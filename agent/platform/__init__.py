"""Platform integration: build, check (lint), submit and inspect fault-tolerant training jobs.

Follows the integration guide's flow: turn a job into API objects, create its ``rings-config-<job>``
ConfigMap, create the job (Volcano Job or AscendJob), then read back its state.
"""
