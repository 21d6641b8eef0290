"""Test double of OIGE 4.0.0's ``tasks/shadow_hand.py`` ``ShadowHandTask``: what omni_sfp depends on is its
spaces. ``observationType: openai`` gives the policy 42 observations; ``asymmetric_observations`` gives the critic
``num_states = 187`` privileged states (``states_buf``, returned as ``obs_dict["states"]``); 20 actions. Episodes
end at ``progress_buf >= max_episode_length - 1`` (``shared/in_hand_manipulation.py``). The dynamics are the
double's point mass; the states carry what the observations do not: the velocity's square in every entry."""

from omniisaacgymenvs.tasks.base import RLTask


class ShadowHandTask(RLTask):
    num_observations = 42  # "openai"
    num_actions = 20

    def __init__(self, name, sim_config, env, offset=None):
        env_cfg = sim_config.task_config["env"]
        assert env_cfg["observationType"] == "openai", "the double has the openai observations only"
        super().__init__(name, sim_config, env, num_states=187 if env_cfg["asymmetric_observations"] else 0)
        self.max_episode_length = env_cfg["episodeLength"]

    def get_observations(self):
        self.obs_buf[:] = 0.0
        return super().get_observations()

    def get_states(self):
        if self.num_states:
            self.states_buf[:] = (self.velocity**2)[:, None]
        return self.states_buf

    def is_done(self):
        failed = self.position.abs() > 1.0
        self.reset_buf[:] = (failed | (self.progress_buf >= self.max_episode_length - 1)).long()
