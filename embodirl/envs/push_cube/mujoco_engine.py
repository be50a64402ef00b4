"""Batched MuJoCo engines behind :class:`~embodirl.envs.push_cube.arm.PushCubeArm`: many copies of one model,
their state exposed as torch tensors that alias the engine's memory (no copies).

* :class:`BatchEngine` (CPU): ``mujoco.batch.Batch`` steps the simulations on a thread pool; its state rows
  are live float64 numpy arrays, wrapped with ``torch.from_numpy``. Results are bit-identical to a loop of
  ``mj_step`` over one ``MjData`` per simulation, at any thread count.
* :class:`WarpEngine` (CUDA, or a CPU warp device for testing): ``mujoco_warp`` runs the same ``MjModel`` in
  float32, its arrays shared with torch through ``wp.to_torch``; on CUDA the substeps are one captured graph.
  It needs the optional extra (``pip install "embodirl[warp]"``) and is imported only when selected.

Both expose :data:`STATE_FIELDS` as ``[N, ...]`` tensors in ``fields`` (writes are the state of the next step)
and ``step(nstep)``; derived quantities (kinematics) are computed by the caller from ``qpos``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from embodirl.errors import ConfigError

__all__ = ["STATE_FIELDS", "BatchEngine", "WarpEngine"]

#: The integration state of a simulation: continuing from these is continuing the simulation exactly.
STATE_FIELDS = ("time", "qpos", "qvel", "act", "ctrl", "qacc_warmstart")


class BatchEngine:
    """``num_envs`` simulations of ``model`` on ``mujoco.batch.Batch`` (CPU, float64).

    Args:
        model: The compiled ``mujoco.MjModel`` (the batch keeps its own copy).
        num_envs: Number of simulations.
        num_threads: Threads stepping them (including the caller's); 0 = one per CPU core.
    """

    device = torch.device("cpu")
    dtype = torch.float64

    def __init__(self, model, num_envs: int, num_threads: int = 0) -> None:
        from mujoco import batch

        self._batch = batch.Batch(model, nsim=num_envs, nthread=num_threads)
        self.fields: dict[str, Tensor] = {name: torch.from_numpy(self._batch.bind(name)) for name in STATE_FIELDS}

    @property
    def num_threads(self) -> int:
        return self._batch.nthread

    def step(self, nstep: int) -> None:
        """Advance every simulation by ``nstep`` calls of ``mj_step`` (raises ``mujoco.batch.SimulationError``
        naming the simulations that failed; those keep their previous state)."""
        self._batch.step(nstep=nstep)

    def model_field(self, name: str) -> Tensor:
        """Model field ``name`` per simulation, ``[N, ...]`` float64, aliasing the batch's memory: writes change
        the next steps (domain randomization). Call :meth:`set_const` after writing masses or inertias."""
        return torch.from_numpy(self._batch.expand(name))

    def set_const(self) -> None:
        """Recompute the constants derived from the model fields (``mj_setConst``) of every simulation."""
        self._batch.set_const()


class WarpEngine:
    """``num_envs`` worlds of ``model`` on ``mujoco_warp`` (float32) on a CUDA device (or warp's CPU device).

    Args:
        model: The compiled ``mujoco.MjModel``.
        num_envs: Number of worlds.
        device: ``cuda[:i]`` (the substeps of :meth:`step` are captured as one CUDA graph) or ``cpu``
            (slower than :class:`BatchEngine`: for tests).
        nconmax: Contacts allocated per world.
        njmax: Constraint rows allocated per world.

    Raises:
        ConfigError: ``mujoco_warp`` or ``warp`` is not installed.
    """

    dtype = torch.float32

    def __init__(self, model, num_envs: int, device: torch.device | str = "cuda", nconmax: int = 16,
                 njmax: int = 64) -> None:
        try:
            import mujoco
            import mujoco_warp as mjw
            import warp as wp
        except ImportError as exc:
            raise ConfigError("engine", "warp", f"mujoco_warp and warp-lang installed ({exc})",
                              'pip install "embodirl[warp]" (pinned mujoco-warp and warp-lang), '
                              "or use the CPU engine (device=cpu)") from None
        wp.config.log_level = wp.LOG_WARNING  # no init banner (warp-lang 1.19 ignores wp.config.quiet)
        wp.init()
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self._wp, self._mjw = wp, mjw
        self._wp_device = wp.get_device(str(self.device))
        data = mujoco.MjData(model)
        with wp.ScopedDevice(self._wp_device):
            self._model = mjw.put_model(model)
            self._data = mjw.put_data(model, data, nworld=num_envs, nconmax=nconmax, njmax=njmax)
        self.fields = {name: self._view(name, num_envs) for name in STATE_FIELDS}
        self._graphs: dict[int, object] = {}

    def _view(self, name: str, num_envs: int) -> Tensor:
        array = getattr(self._data, name)
        if array.size == 0:  # e.g. no activations: warp cannot share an empty array
            return torch.zeros(num_envs, 0, dtype=self.dtype, device=self.device)
        return self._wp.to_torch(array)

    def step(self, nstep: int) -> None:
        """Advance every world by ``nstep`` calls of ``mujoco_warp.step`` on torch's current stream."""
        wp, mjw = self._wp, self._mjw
        if self.device.type != "cuda":
            for _ in range(nstep):
                mjw.step(self._model, self._data)
            return
        with wp.ScopedStream(wp.stream_from_torch(torch.cuda.current_stream(self.device))):
            if nstep not in self._graphs:
                saved = {name: value.clone() for name, value in self.fields.items()}
                mjw.step(self._model, self._data)  # compiles the kernels (a capture cannot), then undone
                for name, value in saved.items():
                    self.fields[name].copy_(value)
                with wp.ScopedCapture() as capture:  # recorded, not run
                    for _ in range(nstep):
                        mjw.step(self._model, self._data)
                self._graphs[nstep] = capture.graph
            wp.capture_launch(self._graphs[nstep])
