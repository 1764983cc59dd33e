"""``strands_sglang.rollout``: ``Rollout`` is :class:`~strands_tito.trajectory.Trajectory`."""

from strands_tito.trajectory import Rollout

__all__ = ["Rollout"]
