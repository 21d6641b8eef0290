"""Test double of the ``omniisaacgymenvs`` package (OmniIsaacGymEnvs 4.0.0); see ../README.md."""
