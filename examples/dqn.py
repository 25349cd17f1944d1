# ruff: noqa: T201, E402 - prints are the log; BLAS is limited before numpy's import
"""DQN with n-step returns and prioritized replay on ``CartPole-v1``, with vecpool.

A single-file, CleanRL-style DQN written in plain numpy: a 4-128-128-2 ReLU
Q-network backpropagated by hand, a Huber loss weighted by the importance weights
of prioritized replay, a target network (hard copies or Polyak averaging), double
DQN, epsilon-greedy exploration with a linear decay, global gradient-norm clipping
and Adam.

The transitions come from :class:`vecpool.ReplayPoolWrapper` around a
:class:`vecpool.AsyncVectorEnv`: the wrapper records every real transition of
``envs.step`` (autoreset steps left out) into ``envs.pool``, a prioritized
``ReplayPool`` (``alpha``), whose ``sample(batch_size, n_step, gamma, beta)``
returns n-step windows (the discounted reward sum, the observation after the last
step summed, ``discount = gamma ** k``) with their rows and importance weights;
``update_priorities`` takes the new ``|TD error|`` of those rows.

Every ``--eval-every`` environment steps (and at the start and the end), the greedy
policy (epsilon 0) plays ``--eval-episodes`` episodes on a separate, seeded, plain
Gymnasium env; their mean return is the run's learning curve.

Run it::

    python examples/dqn.py --seed 0 --save-json dqn.json --curve dqn.png

and plot several saved runs together::

    python examples/dqn.py --plot-from run0.json run1.json --curve both.png
"""

from __future__ import annotations

import os

# The network is small: BLAS threads only fight the env workers for the CPUs (on a
# 2-CPU machine they cut the throughput several-fold). Set before numpy's import.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import functools
import itertools
import json
import math
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

import vecpool

Array = npt.NDArray[np.float64]
Params = dict[str, Array]


# --------------------------------------------------------------------------- flags


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line flags; the names follow CleanRL's ``dqn.py`` where it has them."""

    def boolean(text: str) -> bool:
        if text.lower() in {"1", "true", "yes", "on"}:
            return True
        if text.lower() in {"0", "false", "no", "off"}:
            return False
        msg = f"expected a boolean, got {text!r}"
        raise argparse.ArgumentTypeError(msg)

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--total-steps", type=int, default=300_000, help="env steps")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-workers", type=int, default=None, help="vecpool workers")
    # replay
    p.add_argument("--pool-size", type=int, default=100_000)
    p.add_argument("--alpha", type=float, default=0.6, help="priority exponent")
    p.add_argument("--beta-start", type=float, default=0.4)
    p.add_argument("--beta-end", type=float, default=1.0, help="reached at the end")
    p.add_argument("--priority-eps", type=float, default=1e-6)
    p.add_argument("--n-step", type=int, default=3)
    p.add_argument("--gamma", type=float, default=0.99)
    # learning
    p.add_argument("--learning-rate", type=float, default=5e-4)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument(
        "--learning-starts", type=int, default=2_000, help="env steps before training"
    )
    p.add_argument(
        "--train-frequency",
        type=int,
        default=1,
        help="vector steps (of --num-envs env steps) between training rounds",
    )
    p.add_argument(
        "--gradient-steps", type=int, default=1, help="gradient steps per round"
    )
    p.add_argument(
        "--target-network-frequency",
        type=int,
        default=1_000,
        help="env steps between target-network updates",
    )
    p.add_argument(
        "--tau", type=float, default=1.0, help="target update rate (1: hard copy)"
    )
    p.add_argument("--double-dqn", type=boolean, default=True, nargs="?", const=True)
    p.add_argument("--max-grad-norm", type=float, default=10.0)
    p.add_argument("--huber-delta", type=float, default=1.0)
    p.add_argument("--hidden", type=int, default=128, help="width of both layers")
    # exploration
    p.add_argument("--start-e", type=float, default=1.0)
    p.add_argument("--end-e", type=float, default=0.05)
    p.add_argument(
        "--exploration-fraction",
        type=float,
        default=0.1,
        help="fraction of --total-steps over which epsilon decays to --end-e",
    )
    # evaluation and output
    p.add_argument("--eval-every", type=int, default=10_000, help="env steps")
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--threshold", type=float, default=400.0, help="return to report")
    p.add_argument(
        "--window", type=int, default=20, help="training episodes in the running mean"
    )
    p.add_argument("--quiet", action="store_true", help="no per-evaluation lines")
    p.add_argument(
        "--curve", type=Path, default=None, help="write a PNG learning curve"
    )
    p.add_argument("--save-json", type=Path, default=None, help="write the run as JSON")
    p.add_argument(
        "--plot-from",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="do not train: plot runs saved with --save-json to --curve",
    )
    return p.parse_args(argv)


# --------------------------------------------------------------------------- Q-network


def init_qnet(rng: np.random.Generator, sizes: Sequence[int]) -> Params:
    """PyTorch's ``nn.Linear`` initialisation: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``.

    Args:
        rng: The generator to draw from.
        sizes: Layer widths, input first, the number of actions last.

    Returns:
        Weights ``w{i}`` of shape ``(sizes[i], sizes[i + 1])`` and biases ``b{i}``.
    """
    params: Params = {}
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        bound = 1.0 / math.sqrt(n_in)
        params[f"w{i}"] = rng.uniform(-bound, bound, (n_in, n_out))
        params[f"b{i}"] = rng.uniform(-bound, bound, n_out)
    return params


def q_forward(params: Params, x: npt.ArrayLike) -> tuple[Array, list[Array]]:
    """Q-values of a batch of observations, and every layer's input.

    Args:
        params: The network (:func:`init_qnet`).
        x: Observations, shape ``(batch, obs_dim)``.

    Returns:
        The Q-values, shape ``(batch, n_actions)``, and the input of each layer
        (the observations, then the ReLU outputs) for :func:`q_backward`.
    """
    layers = len(params) // 2
    h = np.asarray(x, dtype=np.float64)
    inputs = []
    for i in range(layers):
        inputs.append(h)
        h = h @ params[f"w{i}"] + params[f"b{i}"]
        if i < layers - 1:
            h = np.maximum(h, 0.0)
    return h, inputs


def q_backward(params: Params, inputs: list[Array], d_q: Array) -> Params:
    """Backpropagate ``d_q`` (dLoss/dQ-values) through the network.

    Args:
        params: The network.
        inputs: What :func:`q_forward` returned next to the Q-values.
        d_q: The loss's gradient with respect to the Q-values.

    Returns:
        The loss's gradient with respect to every parameter.
    """
    grads: Params = {}
    d = d_q
    for i in reversed(range(len(inputs))):
        grads[f"w{i}"] = inputs[i].T @ d
        grads[f"b{i}"] = d.sum(axis=0)
        if i > 0:  # inputs[i] = relu(pre-activation of layer i - 1)
            d = (d @ params[f"w{i}"].T) * (inputs[i] > 0.0)
    return grads


# --------------------------------------------------------------------------- DQN loss


def td_targets(
    online: Params,
    target: Params,
    batch: vecpool.ReplaySample,
    *,
    double: bool,
) -> Array:
    """The n-step TD targets of a sampled batch.

    ``reward + discount * (1 - terminated) * Q_target(next_obs, a*)``, where
    ``reward`` is the discounted sum of the window's rewards, ``discount`` is
    ``gamma ** k`` for its ``k`` steps, and ``a*`` is the target network's greedy
    action (the online network's with ``double``, as in double DQN). A truncated
    window (time limit) still bootstraps from its last observation.

    Args:
        online: The online network.
        target: The target network.
        batch: A sample of :meth:`vecpool.ReplayPool.sample` with ``n_step``.
        double: Pick the next action with the online network.

    Returns:
        One target per row of the batch.
    """
    next_q, _ = q_forward(target, batch.next_obs)
    if double:
        online_next, _ = q_forward(online, batch.next_obs)
        best = online_next.argmax(axis=1)
    else:
        best = next_q.argmax(axis=1)
    bootstrap = next_q[np.arange(len(best)), best]
    alive = 1.0 - np.asarray(batch.terminated, dtype=np.float64)
    targets: Array = batch.reward + batch.discount * alive * bootstrap
    return targets


def dqn_loss_and_grad(
    params: Params,
    obs: npt.ArrayLike,
    actions: npt.NDArray[np.integer[Any]],
    targets: Array,
    weights: Array,
    delta: float = 1.0,
) -> tuple[float, Params, Array]:
    """The importance-weighted Huber loss of Q(obs, action) against the targets.

    ``loss = mean(weights * huber(Q(obs, action) - targets))``, with
    ``huber(x) = x**2 / 2`` for ``|x| <= delta`` and ``delta * (|x| - delta / 2)``
    beyond. The targets are constants (no gradient flows into them).

    Args:
        params: The online network.
        obs: Observations, shape ``(batch, obs_dim)``.
        actions: The action taken in each.
        targets: The TD targets (:func:`td_targets`).
        weights: The importance weights of the rows.
        delta: Where the Huber loss turns from quadratic to linear.

    Returns:
        The loss, its gradient, and the TD errors ``Q(obs, action) - targets``.
    """
    q, inputs = q_forward(params, obs)
    n = len(q)
    rows = np.arange(n)
    td = q[rows, actions] - targets
    abs_td = np.abs(td)
    huber = np.where(abs_td <= delta, 0.5 * td**2, delta * (abs_td - 0.5 * delta))
    loss = float(np.mean(weights * huber))
    d_q = np.zeros_like(q)
    d_q[rows, actions] = weights * np.clip(td, -delta, delta) / n
    return loss, q_backward(params, inputs, d_q), td


def gradient_check(seed: int = 0, n: int = 32, eps: float = 1e-6) -> float:
    """Largest relative error of :func:`dqn_loss_and_grad` against finite differences.

    Builds a small network (4-16-16-3) and a random batch whose TD errors lie on both
    sides of the Huber loss's ``delta``, with importance weights in ``(0, 1]``, and
    compares every analytic partial derivative with a central difference. The error
    of a parameter tensor is ``max |g - g_fd| / max(max |g|, max |g_fd|)``; the worst
    one is returned. Below ``1e-5`` means the backward pass is right (a wrong term
    gives ``1e-2`` or more).

    Args:
        seed: Seed of the network and the batch.
        n: Batch size.
        eps: Step of the central differences.

    Returns:
        The largest relative error.
    """
    rng = np.random.default_rng(seed)
    params = init_qnet(rng, [4, 16, 16, 3])
    obs = rng.standard_normal((n, 4))
    actions = rng.integers(0, 3, size=n)
    q, _ = q_forward(params, obs)
    # TD errors of magnitude 0.2 to 3 around delta = 1, both signs
    offsets = rng.uniform(0.2, 3.0, size=n) * rng.choice([-1.0, 1.0], size=n)
    targets = q[np.arange(n), actions] + offsets
    weights = rng.uniform(0.1, 1.0, size=n)

    def loss_of() -> float:
        return dqn_loss_and_grad(params, obs, actions, targets, weights)[0]

    _, grads, _ = dqn_loss_and_grad(params, obs, actions, targets, weights)
    worst = 0.0
    for name, value in params.items():
        numeric = np.zeros_like(value)
        for idx in np.ndindex(value.shape):
            saved = value[idx]
            value[idx] = saved + eps
            up = loss_of()
            value[idx] = saved - eps
            down = loss_of()
            value[idx] = saved
            numeric[idx] = (up - down) / (2 * eps)
        scale = max(np.abs(numeric).max(), np.abs(grads[name]).max(), 1e-12)
        worst = max(worst, float(np.abs(numeric - grads[name]).max() / scale))
    return worst


# --------------------------------------------------------------------------- optimiser


def clip_grad_norm(grads: Params, max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most ``max_norm``.

    Returns:
        The norm before clipping.
    """
    total = math.sqrt(sum(float(np.vdot(g, g)) for g in grads.values()))
    if total > max_norm:
        for g in grads.values():
            g *= max_norm / (total + 1e-6)
    return total


class Adam:
    """Adam (Kingma & Ba) with PyTorch's defaults, updating numpy arrays in place."""

    def __init__(
        self,
        params: Params,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        """Zero first and second moments for every parameter."""
        self.lr = lr
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.t = 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, params: Params, grads: Params) -> None:
        """Update ``params`` in place."""
        self.t += 1
        bias1 = 1.0 - self.beta1**self.t
        bias2 = 1.0 - self.beta2**self.t
        for k, g in grads.items():
            m, v = self.m[k], self.v[k]
            m *= self.beta1
            m += (1.0 - self.beta1) * g
            v *= self.beta2
            v += (1.0 - self.beta2) * g * g
            params[k] -= (self.lr / bias1) * m / (np.sqrt(v / bias2) + self.eps)


# --------------------------------------------------------------------------- training


def linear_schedule(start: float, end: float, duration: float, t: float) -> float:
    """``start`` at ``t = 0``, linearly to ``end`` at ``t = duration``, then flat."""
    if duration <= 0:
        return end
    return start + (end - start) * min(1.0, t / duration)


def evaluate(env: gym.Env[Any, Any], params: Params, episodes: int, seed: int) -> Array:
    """Returns of ``episodes`` episodes of the greedy policy (epsilon 0).

    Episode ``i`` starts from ``env.reset(seed=seed + i)``, so every evaluation of a
    run plays the same initial states.

    Args:
        env: A single (not vectorised) env with a time limit.
        params: The Q-network.
        episodes: How many episodes.
        seed: Seed of the first episode's reset.

    Returns:
        The undiscounted return of each episode.
    """
    returns = np.zeros(episodes)
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done = False
        while not done:
            q, _ = q_forward(params, np.asarray(obs)[None])
            obs, reward, terminated, truncated, _ = env.step(int(q[0].argmax()))
            returns[i] += float(reward)
            done = bool(terminated or truncated)
    return returns


def make_envs(args: argparse.Namespace) -> vecpool.ReplayPoolWrapper:
    """``--num-envs`` envs in a :class:`vecpool.AsyncVectorEnv`, recorded to a pool.

    Args:
        args: The flags (:func:`parse_args`).

    Returns:
        The wrapper; its ``pool`` is prioritized with ``--alpha``.
    """
    return vecpool.ReplayPoolWrapper(
        vecpool.AsyncVectorEnv(
            [functools.partial(gym.make, args.env_id) for _ in range(args.num_envs)],
            num_workers=args.num_workers,
        ),
        pool_size=args.pool_size,
        alpha=args.alpha,
        seed=args.seed,
    )


def train(
    args: argparse.Namespace, envs: vecpool.ReplayPoolWrapper | None = None
) -> dict[str, Any]:
    """Train DQN with the given flags.

    Args:
        args: The flags (:func:`parse_args`).
        envs: The recorded vector env to use (left open); by default one is made
            with :func:`make_envs` and closed at the end.

    Returns:
        The flags, one record per evaluation (the learning curve), the training
        episodes and a summary.
    """
    rng = np.random.default_rng(args.seed)
    own_envs = envs is None
    if envs is None:
        envs = make_envs(args)
    eval_env = gym.make(args.env_id)
    eval_seed = 1_000_000 + 1_000 * args.seed
    try:
        num_envs = envs.num_envs
        obs_space = envs.single_observation_space
        action_space = envs.single_action_space
        if not isinstance(obs_space, gym.spaces.Box) or not isinstance(
            action_space, gym.spaces.Discrete
        ):
            msg = (
                f"DQN needs Box observations and Discrete actions, got "
                f"{obs_space} and {action_space}"
            )
            raise TypeError(msg)
        obs_dim = int(np.prod(obs_space.shape))
        n_actions = int(action_space.n)
        sizes = [obs_dim, args.hidden, args.hidden, n_actions]
        online = init_qnet(rng, sizes)
        target = {k: v.copy() for k, v in online.items()}
        optimizer = Adam(online, lr=args.learning_rate)
        pool = envs.pool
        num_iterations = max(1, args.total_steps // num_envs)
        decay_steps = args.exploration_fraction * args.total_steps

        episode_return = np.zeros(num_envs)
        episode_length = np.zeros(num_envs, np.int64)
        restarting = np.zeros(num_envs, bool)  # NEXT_STEP autoreset: a reset step next
        recent: deque[float] = deque(maxlen=args.window)
        episodes: list[tuple[int, float]] = []  # (global step at its end, return)
        curve: list[dict[str, float]] = []
        stats: dict[str, list[float]] = {"loss": [], "q": [], "weight_min": []}
        gradient_steps = 0
        global_step = 0
        next_target = args.target_network_frequency
        next_eval = 0
        eval_time = 0.0
        columns = (
            "env_steps,greedy_return,greedy_min,loss,q_mean,epsilon,beta,"
            "train_return,episodes,gradient_steps,weight_min,sps"
        )
        if not args.quiet:
            print(columns)

        def log_evaluation() -> None:
            nonlocal eval_time
            begin = time.perf_counter()
            returns = evaluate(eval_env, online, args.eval_episodes, eval_seed)
            eval_time += time.perf_counter() - begin
            train_time = time.perf_counter() - start - eval_time
            row = {
                "env_steps": global_step,
                "greedy_return": float(returns.mean()),
                "greedy_min": float(returns.min()),
                "loss": float(np.mean(stats["loss"])) if stats["loss"] else math.nan,
                "q_mean": float(np.mean(stats["q"])) if stats["q"] else math.nan,
                "epsilon": epsilon,
                "beta": beta,
                "train_return": float(np.mean(recent)) if recent else math.nan,
                "episodes": len(episodes),
                "gradient_steps": gradient_steps,
                "weight_min": (
                    float(np.mean(stats["weight_min"]))
                    if stats["weight_min"]
                    else math.nan
                ),
                "sps": global_step / train_time if train_time > 0 else math.nan,
                "time": time.perf_counter() - start,
            }
            for values in stats.values():
                values.clear()
            curve.append(row)
            if not args.quiet:
                print(
                    f"{global_step},{row['greedy_return']:.1f},"
                    f"{row['greedy_min']:.0f},{row['loss']:.4f},{row['q_mean']:.2f},"
                    f"{epsilon:.3f},{beta:.3f},{row['train_return']:.1f},"
                    f"{len(episodes)},{gradient_steps},{row['weight_min']:.3f},"
                    f"{row['sps']:.0f}",
                    flush=True,
                )

        start = time.perf_counter()
        obs, _ = envs.reset(seed=args.seed)
        epsilon, beta = args.start_e, args.beta_start
        if args.eval_every > 0:
            log_evaluation()
            next_eval = args.eval_every
        for iteration in range(num_iterations):
            # ---- act: epsilon-greedy, one epsilon for all envs
            epsilon = linear_schedule(
                args.start_e, args.end_e, decay_steps, global_step
            )
            q, _ = q_forward(online, obs)
            actions = q.argmax(axis=1)
            explore = rng.random(num_envs) < epsilon
            actions[explore] = rng.integers(0, n_actions, int(explore.sum()))
            obs, rewards, terminated, truncated, _ = envs.step(actions)
            global_step += num_envs

            # ---- training episodes (the wrapper has recorded the transitions)
            live = ~restarting
            episode_return += np.where(live, rewards, 0.0)
            episode_length += live
            ended = live & (terminated | truncated)
            for i in np.flatnonzero(ended):
                recent.append(float(episode_return[i]))
                episodes.append((global_step, float(episode_return[i])))
            episode_return[ended | restarting] = 0.0
            episode_length[ended | restarting] = 0
            restarting = ended

            # ---- learn
            beta = linear_schedule(
                args.beta_start, args.beta_end, args.total_steps, global_step
            )
            if (
                global_step >= args.learning_starts
                and iteration % args.train_frequency == 0
            ):
                for _ in range(args.gradient_steps):
                    batch = pool.sample(
                        args.batch_size, n_step=args.n_step, gamma=args.gamma, beta=beta
                    )
                    targets = td_targets(online, target, batch, double=args.double_dqn)
                    loss, grads, td = dqn_loss_and_grad(
                        online,
                        batch.obs,
                        batch.action,
                        targets,
                        batch.weights,
                        args.huber_delta,
                    )
                    clip_grad_norm(grads, args.max_grad_norm)
                    optimizer.step(online, grads)
                    pool.update_priorities(
                        batch.indices, np.abs(td) + args.priority_eps
                    )
                    gradient_steps += 1
                    stats["loss"].append(loss)
                    stats["q"].append(float(np.mean(targets + td)))
                    stats["weight_min"].append(float(batch.weights.min()))

            # ---- target network
            if global_step >= next_target:
                next_target += args.target_network_frequency
                for k, value in online.items():
                    target[k] *= 1.0 - args.tau
                    target[k] += args.tau * value

            # ---- evaluate
            last = iteration == num_iterations - 1
            if args.eval_every > 0 and (global_step >= next_eval or last):
                log_evaluation()
                while next_eval <= global_step:
                    next_eval += args.eval_every
        wall_time = time.perf_counter() - start
    finally:
        eval_env.close()
        if own_envs:
            envs.close()

    above = [r["env_steps"] for r in curve if r["greedy_return"] >= args.threshold]
    return {
        "args": {
            k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
        },
        "curve": curve,
        "episodes": episodes,
        "steps_to_threshold": above[0] if above else None,
        "evaluations_above_threshold": len(above),
        "final_greedy_return": curve[-1]["greedy_return"] if curve else math.nan,
        "best_greedy_return": max(
            (r["greedy_return"] for r in curve), default=math.nan
        ),
        "env_steps": global_step,
        "gradient_steps": gradient_steps,
        "wall_time": wall_time,
        "eval_time": eval_time,
        "sps": global_step / (wall_time - eval_time),
    }


# --------------------------------------------------------------------------- plotting


def plot_curves(runs: Sequence[dict[str, Any]], path: Path) -> None:
    """Greedy return (mean of the evaluation episodes) against env steps, per run."""
    import matplotlib  # plotting is optional: import it only when asked

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for i, run in enumerate(runs):
        ax.plot(
            [r["env_steps"] for r in run["curve"]],
            [r["greedy_return"] for r in run["curve"]],
            color=f"C{i}",
            marker="o",
            markersize=2.5,
            linewidth=1.2,
            label=f"seed {run['args']['seed']}",
        )
    first = runs[0]["args"]
    ax.axhline(first.get("threshold", 400.0), color="grey", linestyle="--", lw=1)
    ax.set(
        xlabel="environment steps",
        ylabel=f"greedy return (mean of {first.get('eval_episodes', 20)} episodes)",
        title=f"DQN (numpy, n-step, prioritized) on {first['env_id']} with vecpool",
        ylim=(0, 520),
    )
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Train (or, with ``--plot-from``, only plot) and return the run's summary."""
    args = parse_args(argv)
    if args.plot_from:
        runs = [json.loads(p.read_text()) for p in args.plot_from]
        if args.curve is not None:
            plot_curves(runs, args.curve)
        return {"runs": runs}

    result = train(args)
    reached = result["steps_to_threshold"]
    print(
        "; ".join(
            [
                f"seed {args.seed}: final greedy return "
                f"{result['final_greedy_return']:.1f}",
                f"best {result['best_greedy_return']:.1f}",
                f"did not reach {args.threshold:g}"
                if reached is None
                else f"first >= {args.threshold:g} at step {reached}",
                f"{result['wall_time']:.1f} s ({result['eval_time']:.1f} s evaluating)",
                f"{result['sps']:.0f} env steps/s",
            ]
        )
    )
    if args.save_json is not None:
        args.save_json.write_text(json.dumps(result, indent=1))
    if args.curve is not None:
        plot_curves([result], args.curve)
    return result


if __name__ == "__main__":
    main()
