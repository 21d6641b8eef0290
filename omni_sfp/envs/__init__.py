"""Adapters that expose environments to skrl 2 (embedded tasks here; OmniIsaacGymEnvs and Isaac Lab alongside)."""
