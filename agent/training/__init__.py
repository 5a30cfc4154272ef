"""Code that runs inside a training job, not in the agent: :mod:`agent.training.progress_client`, the progress
heartbeat a training loop's rank 0 writes. Standard library only; it imports nothing of the agent
(.importlinter), so the one file can be copied into a training image."""
