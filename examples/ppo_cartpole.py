# ruff: noqa: T201, E402 - prints are the log; BLAS is limited before numpy's import
"""PPO on ``CartPole-v1`` with :class:`vecpool.AsyncVectorEnv` and ``Sampler``.

A single-file, CleanRL-style implementation of PPO (clipped surrogate objective,
GAE, value loss, entropy bonus, global gradient-norm clipping, Adam) written in
plain numpy: two 64-64 tanh MLPs (actor and critic), backpropagated by hand.

Rollouts come from ``vecpool.sampling.sampler.Sampler``: each update asks it for
``num_steps`` steps of ``num_envs`` environments; the policy's log-probabilities
and value estimates ride along in the batch's ``agent_info``.

Run it::

    python examples/ppo_cartpole.py --seed 1 --curve ppo.png --save-json ppo.json

and plot several saved runs together::

    python examples/ppo_cartpole.py --plot-from run1.json run2.json --curve both.png
"""

from __future__ import annotations

import os

# The networks are tiny: BLAS threads only fight the env workers for the CPUs (on
# a 2-CPU machine they cut the throughput by 4x). Set before numpy is imported.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse
import functools
import json
import math
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import numpy.typing as npt

import vecpool
from vecpool.sampling.sampler import Sampler

Array = npt.NDArray[np.float64]
Params = dict[str, Array]


# --------------------------------------------------------------------------- flags


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line flags; the names follow CleanRL's ``ppo.py``."""

    def boolean(text: str) -> bool:
        if text.lower() in {"1", "true", "yes", "on"}:
            return True
        if text.lower() in {"0", "false", "no", "off"}:
            return False
        msg = f"expected a boolean, got {text!r}"
        raise argparse.ArgumentTypeError(msg)

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env-id", default="CartPole-v1")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--total-timesteps", type=int, default=200_000)
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument(
        "--num-steps", type=int, default=64, help="steps per env per rollout"
    )
    p.add_argument("--num-workers", type=int, default=None, help="vecpool workers")
    p.add_argument(
        "--env-batch-size",
        type=int,
        default=None,
        help="AsyncVectorEnv(batch_size=...): the policy acts on this many envs "
        "while the others step (the Sampler's alternating mode)",
    )
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--anneal-lr", type=boolean, default=True, nargs="?", const=True)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--norm-adv", type=boolean, default=True, nargs="?", const=True)
    p.add_argument("--clip-coef", type=float, default=0.2)
    p.add_argument("--clip-vloss", type=boolean, default=True, nargs="?", const=True)
    p.add_argument("--ent-coef", type=float, default=0.01)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--hidden", type=int, default=64, help="width of both hidden layers")
    p.add_argument(
        "--window", type=int, default=20, help="episodes in the running mean"
    )
    p.add_argument("--threshold", type=float, default=400.0, help="return to report")
    p.add_argument(
        "--eval-episodes", type=int, default=16, help="final evaluation episodes"
    )
    p.add_argument("--quiet", action="store_true", help="no per-update log lines")
    p.add_argument(
        "--curve", type=Path, default=None, help="write a PNG learning curve"
    )
    p.add_argument(
        "--save-json", type=Path, default=None, help="write the curve as JSON"
    )
    p.add_argument(
        "--plot-from",
        type=Path,
        nargs="+",
        default=None,
        metavar="JSON",
        help="do not train: plot runs saved with --save-json to --curve",
    )
    return p.parse_args(argv)


# --------------------------------------------------------------------------- networks


def orthogonal(rng: np.random.Generator, n_in: int, n_out: int, gain: float) -> Array:
    """An ``(n_in, n_out)`` weight matrix with orthonormal rows or columns, scaled."""
    a = rng.standard_normal((max(n_in, n_out), min(n_in, n_out)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))  # a uniformly distributed orthogonal matrix
    if n_in < n_out:
        q = q.T
    return gain * q


def init_mlp(
    rng: np.random.Generator, prefix: str, sizes: Sequence[int], out_gain: float
) -> Params:
    """Orthogonal weights (gain sqrt(2) for hidden layers), zero biases."""
    params: Params = {}
    layers = len(sizes) - 1
    for i in range(layers):
        gain = out_gain if i == layers - 1 else math.sqrt(2.0)
        params[f"{prefix}.w{i}"] = orthogonal(rng, sizes[i], sizes[i + 1], gain)
        params[f"{prefix}.b{i}"] = np.zeros(sizes[i + 1])
    return params


def mlp_forward(params: Params, prefix: str, x: Array) -> tuple[Array, list[Array]]:
    """Tanh MLP with a linear output; returns the output and every layer's input."""
    layers = sum(1 for name in params if name.startswith(f"{prefix}.w"))
    inputs = []
    h = x
    for i in range(layers):
        inputs.append(h)
        h = h @ params[f"{prefix}.w{i}"] + params[f"{prefix}.b{i}"]
        if i < layers - 1:
            h = np.tanh(h)
    return h, inputs


def mlp_backward(
    params: Params, prefix: str, inputs: list[Array], d_out: Array, grads: Params
) -> None:
    """Backpropagate ``d_out`` (dLoss/dOutput) through the MLP into ``grads``."""
    d = d_out
    for i in reversed(range(len(inputs))):
        grads[f"{prefix}.w{i}"] = inputs[i].T @ d
        grads[f"{prefix}.b{i}"] = d.sum(axis=0)
        if i > 0:  # inputs[i] = tanh(pre-activation of layer i - 1)
            d = (d @ params[f"{prefix}.w{i}"].T) * (1.0 - inputs[i] ** 2)


def log_softmax(logits: Array) -> Array:
    """Numerically stable ``log(softmax(logits))`` along the last axis."""
    z = logits - logits.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


class Agent:
    """Separate actor (logits) and critic (value) MLPs, as in CleanRL's ``Agent``."""

    def __init__(
        self, obs_dim: int, n_actions: int, hidden: int, rng: np.random.Generator
    ) -> None:
        """Initialise both networks with CleanRL's orthogonal gains."""
        self.rng = rng
        self.params: Params = {
            **init_mlp(rng, "actor", [obs_dim, hidden, hidden, n_actions], 0.01),
            **init_mlp(rng, "critic", [obs_dim, hidden, hidden, 1], 1.0),
        }

    def value(self, obs: npt.ArrayLike) -> Array:
        """State values ``V(obs)``, shape ``obs.shape[:-1]``."""
        x = np.asarray(obs, dtype=np.float64)
        v, _ = mlp_forward(self.params, "critic", x.reshape(-1, x.shape[-1]))
        return v.reshape(x.shape[:-1])

    def __call__(
        self, obs: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.int64], dict[str, Array]]:
        """The Sampler's policy: sample actions, report their log-probs and values."""
        x = np.asarray(obs, dtype=np.float64)
        logits, _ = mlp_forward(self.params, "actor", x)
        logp = log_softmax(logits)
        # inverse-CDF sampling from each row's categorical distribution
        cdf = np.exp(logp).cumsum(axis=1)
        u = self.rng.random((len(x), 1)) * cdf[:, -1:]
        actions = np.minimum((cdf < u).sum(axis=1), logits.shape[1] - 1)
        info = {
            "logprob": np.take_along_axis(logp, actions[:, None], axis=1)[:, 0],
            "value": mlp_forward(self.params, "critic", x)[0][:, 0],
        }
        return actions.astype(np.int64), info


# --------------------------------------------------------------------------- PPO loss


class Minibatch(NamedTuple):
    """Flat rollout data for one gradient step."""

    obs: Array
    actions: npt.NDArray[np.int64]
    logprobs: Array  # log pi_old(a|s)
    values: Array  # V_old(s)
    advantages: Array
    returns: Array


def ppo_loss_and_grad(
    params: Params,
    mb: Minibatch,
    *,
    clip_coef: float,
    ent_coef: float,
    vf_coef: float,
    clip_vloss: bool = True,
    norm_adv: bool = True,
) -> tuple[float, Params, dict[str, float]]:
    """CleanRL's PPO loss on one minibatch, its gradient and some statistics.

    ``loss = pg_loss - ent_coef * entropy + vf_coef * v_loss`` with the clipped
    surrogate ``pg_loss = mean(max(-A r, -A clip(r, 1 - c, 1 + c)))``, the (optionally
    clipped) squared value error ``v_loss`` and the mean policy entropy.
    """
    n = len(mb.obs)
    grads: Params = {}

    # ---- actor: forward
    logits, actor_inputs = mlp_forward(params, "actor", mb.obs)
    logp_all = log_softmax(logits)
    probs = np.exp(logp_all)
    newlogp = logp_all[np.arange(n), mb.actions]
    entropy = -(probs * logp_all).sum(axis=1)
    logratio = newlogp - mb.logprobs
    ratio = np.exp(logratio)

    adv = mb.advantages
    if norm_adv:
        adv = (adv - adv.mean()) / (adv.std(ddof=1 if n > 1 else 0) + 1e-8)
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * np.clip(ratio, 1.0 - clip_coef, 1.0 + clip_coef)
    pg_loss = np.maximum(pg_unclipped, pg_clipped).mean()

    # ---- actor: backward. The max picks the unclipped term where it is the larger
    # one; elsewhere the clipped term is active and flat in the ratio (zero gradient).
    d_ratio = np.where(pg_unclipped >= pg_clipped, -adv, 0.0) / n
    d_newlogp = d_ratio * ratio
    onehot = np.zeros_like(logits)
    onehot[np.arange(n), mb.actions] = 1.0
    d_logits = d_newlogp[:, None] * (onehot - probs)  # d log pi(a) / d logits
    # d entropy / d logits = -p * (log p + H); the loss has -ent_coef * mean(H)
    d_logits += (ent_coef / n) * probs * (logp_all + entropy[:, None])
    mlp_backward(params, "actor", actor_inputs, d_logits, grads)

    # ---- critic: forward and backward
    value_out, critic_inputs = mlp_forward(params, "critic", mb.obs)
    newvalue = value_out[:, 0]
    v_err = newvalue - mb.returns
    if clip_vloss:
        v_clipped = mb.values + np.clip(newvalue - mb.values, -clip_coef, clip_coef)
        sq_unclipped = v_err**2
        sq_clipped = (v_clipped - mb.returns) ** 2
        v_loss = 0.5 * np.maximum(sq_unclipped, sq_clipped).mean()
        # where the clipped error is larger, it is flat in the new value
        d_value = np.where(sq_unclipped >= sq_clipped, v_err, 0.0) / n
    else:
        v_loss = 0.5 * (v_err**2).mean()
        d_value = v_err / n
    mlp_backward(params, "critic", critic_inputs, vf_coef * d_value[:, None], grads)

    loss = pg_loss - ent_coef * entropy.mean() + vf_coef * v_loss
    stats = {
        "pg_loss": float(pg_loss),
        "v_loss": float(v_loss),
        "entropy": float(entropy.mean()),
        "approx_kl": float(((ratio - 1.0) - logratio).mean()),
        "clipfrac": float((np.abs(ratio - 1.0) > clip_coef).mean()),
    }
    return float(loss), grads, stats


def gradient_check(seed: int = 0, n: int = 32, eps: float = 1e-6) -> float:
    """Largest relative error of :func:`ppo_loss_and_grad` against finite differences.

    Builds a small agent and a random minibatch (ratios both inside and outside the
    clip range, clipped and unclipped value errors) and compares every analytic
    partial derivative with a central difference, with and without value clipping
    and advantage normalisation. The error of a parameter tensor is
    ``max |g - g_fd| / max(max |g|, max |g_fd|)``; the worst one is returned. Below
    ``1e-5`` means the backward pass is right (a wrong term gives ``1e-2`` or more).
    """
    rng = np.random.default_rng(seed)
    agent = Agent(obs_dim=4, n_actions=3, hidden=8, rng=rng)
    for name in agent.params:  # sizeable outputs, so that every term matters
        if name.endswith("w2"):
            agent.params[name] *= 3.0
        elif ".b" in name:
            agent.params[name] = 0.1 * rng.standard_normal(agent.params[name].shape)
    obs = rng.standard_normal((n, 4))
    actions = rng.integers(0, 3, size=n)
    logits, _ = mlp_forward(agent.params, "actor", obs)
    logp = log_softmax(logits)[np.arange(n), actions]
    values = agent.value(obs)
    mb = Minibatch(
        obs=obs,
        actions=actions,
        logprobs=logp + rng.uniform(-0.6, 0.6, size=n),  # ratios e^-0.6 .. e^0.6
        values=values + rng.uniform(-0.5, 0.5, size=n),
        advantages=rng.standard_normal(n),
        returns=values + rng.standard_normal(n),
    )
    worst = 0.0
    for clipped in (True, False):
        kwargs: dict[str, Any] = {
            "clip_coef": 0.2,
            "ent_coef": 0.05,
            "vf_coef": 0.5,
            "clip_vloss": clipped,
            "norm_adv": clipped,
        }
        _, grads, _ = ppo_loss_and_grad(agent.params, mb, **kwargs)
        for name, value in agent.params.items():
            numeric = np.zeros_like(value)
            for idx in np.ndindex(value.shape):
                saved = value[idx]
                value[idx] = saved + eps
                up = ppo_loss_and_grad(agent.params, mb, **kwargs)[0]
                value[idx] = saved - eps
                down = ppo_loss_and_grad(agent.params, mb, **kwargs)[0]
                value[idx] = saved
                numeric[idx] = (up - down) / (2 * eps)
            scale = max(np.abs(numeric).max(), np.abs(grads[name]).max(), 1e-12)
            worst = max(worst, float(np.abs(numeric - grads[name]).max() / scale))
    return worst


# --------------------------------------------------------------------------- optimiser


def clip_grad_norm(grads: Params, max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most ``max_norm``."""
    total = math.sqrt(sum(float((g**2).sum()) for g in grads.values()))
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= coef
    return total


class Adam:
    """Adam (Kingma & Ba), with PyTorch's defaults except CleanRL's ``eps=1e-5``."""

    def __init__(
        self,
        params: Params,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-5,
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
            self.m[k] = self.beta1 * self.m[k] + (1.0 - self.beta1) * g
            self.v[k] = self.beta2 * self.v[k] + (1.0 - self.beta2) * g * g
            denom = np.sqrt(self.v[k] / bias2) + self.eps
            params[k] -= (self.lr / bias1) * self.m[k] / denom


# --------------------------------------------------------------------------- GAE


def compute_gae(
    rewards: Array,
    values: Array,
    next_values: Array,
    terminated: npt.NDArray[np.bool_],
    truncated: npt.NDArray[np.bool_],
    valid: npt.NDArray[np.bool_],
    gamma: float,
    gae_lambda: float,
) -> Array:
    """Generalised advantage estimates for ``[T, B]`` rollouts.

    ``next_values[t]`` is ``V(next_obs[t])``: the TD target bootstraps from it unless
    the episode *terminated* at ``t`` (a truncated episode's final observation still
    has a value). The advantage recursion stops at every episode end
    (terminated or truncated), and the invalid reset rows that NEXT_STEP autoreset
    puts after an episode end get zero advantage.
    """
    advantages = np.zeros_like(rewards)
    last = np.zeros(rewards.shape[1])
    for t in reversed(range(len(rewards))):
        delta = rewards[t] + gamma * next_values[t] * ~terminated[t] - values[t]
        last = delta + gamma * gae_lambda * ~(terminated[t] | truncated[t]) * last
        last = np.where(valid[t], last, 0.0)
        advantages[t] = last
    return advantages


# --------------------------------------------------------------------------- training


def evaluate(sampler: Sampler, agent: Agent, episodes: int, max_steps: int) -> Array:
    """Returns of ``episodes`` fresh episodes of the (stochastic) policy.

    ``Sampler.evaluate`` resets every env and runs them together; taking only the
    first episode of each env keeps short episodes from being over-represented.
    """
    returns: list[float] = []
    while len(returns) < episodes:
        records = sampler.evaluate(agent, max_steps=max_steps)
        if not records:
            msg = f"no episode ended within {max_steps} steps"
            raise RuntimeError(msg)
        firsts = {r.env_index: r.return_ for r in reversed(records)}
        returns.extend(firsts[i] for i in sorted(firsts))
    return np.asarray(returns[:episodes])


def train(args: argparse.Namespace) -> dict[str, Any]:
    """Train PPO with the given flags; returns the learning curve and summary."""
    rng = np.random.default_rng(args.seed)
    batch_size = args.num_envs * args.num_steps
    num_updates = max(1, args.total_timesteps // batch_size)

    envs = vecpool.AsyncVectorEnv(
        [functools.partial(gym.make, args.env_id) for _ in range(args.num_envs)],
        num_workers=args.num_workers,
        batch_size=args.env_batch_size,
    )
    try:
        obs_dim = int(np.prod(envs.single_observation_space.shape))
        n_actions = int(envs.single_action_space.n)
        agent = Agent(obs_dim, n_actions, args.hidden, rng)
        optimizer = Adam(agent.params, lr=args.learning_rate)
        sampler = Sampler(envs, agent, args.num_steps, seed=args.seed)

        recent: deque[float] = deque(maxlen=args.window)
        episodes: list[tuple[int, float]] = []  # (global step at its end, return)
        curve: list[dict[str, float]] = []
        global_step = 0
        start = time.perf_counter()
        if not args.quiet:
            print(
                "update,global_step,avg_return,episodes,pg_loss,v_loss,entropy,"
                "approx_kl,clipfrac,lr,sps"
            )

        for update in range(1, num_updates + 1):
            if args.anneal_lr:
                frac = 1.0 - (update - 1.0) / num_updates
                optimizer.lr = frac * args.learning_rate

            # ---- rollout
            batch, finished = sampler.obtain_samples()
            global_step += batch_size
            for record in finished:
                recent.append(record.return_)
                episodes.append((global_step, record.return_))

            # ---- advantages
            valid = np.asarray(batch.valid, dtype=bool)
            terminated = np.asarray(batch.terminated, dtype=bool)
            truncated = np.asarray(batch.truncated, dtype=bool)
            info = batch.agent_info  # what the policy returned next to its actions
            values = np.asarray(info["value"], dtype=np.float64)
            next_values = agent.value(batch.next_obs)
            advantages = compute_gae(
                np.asarray(batch.reward, dtype=np.float64),
                values,
                next_values,
                terminated,
                truncated,
                valid,
                args.gamma,
                args.gae_lambda,
            )
            returns = advantages + values

            # ---- flatten the valid rows
            flat = Minibatch(
                obs=np.asarray(batch.obs, dtype=np.float64)[valid].reshape(-1, obs_dim),
                actions=np.asarray(batch.action, dtype=np.int64)[valid],
                logprobs=np.asarray(info["logprob"], dtype=np.float64)[valid],
                values=values[valid],
                advantages=advantages[valid],
                returns=returns[valid],
            )

            # ---- optimise the policy and value networks
            stats: dict[str, list[float]] = {}
            for _ in range(args.update_epochs):
                order = rng.permutation(len(flat.obs))
                for idx in np.array_split(order, args.num_minibatches):
                    mb = Minibatch(*(field[idx] for field in flat))
                    _, grads, mb_stats = ppo_loss_and_grad(
                        agent.params,
                        mb,
                        clip_coef=args.clip_coef,
                        ent_coef=args.ent_coef,
                        vf_coef=args.vf_coef,
                        clip_vloss=args.clip_vloss,
                        norm_adv=args.norm_adv,
                    )
                    clip_grad_norm(grads, args.max_grad_norm)
                    optimizer.step(agent.params, grads)
                    for key, val in mb_stats.items():
                        stats.setdefault(key, []).append(val)

            # ---- log
            elapsed = time.perf_counter() - start
            row = {
                "update": update,
                "global_step": global_step,
                "avg_return": float(np.mean(recent)) if recent else math.nan,
                "episodes": len(episodes),
                **{key: float(np.mean(val)) for key, val in stats.items()},
                "lr": optimizer.lr,
                "sps": global_step / elapsed,
            }
            curve.append(row)
            if not args.quiet:
                print(
                    f"{update},{global_step},{row['avg_return']:.1f},{len(episodes)},"
                    f"{row['pg_loss']:.4f},{row['v_loss']:.4f},{row['entropy']:.4f},"
                    f"{row['approx_kl']:.5f},{row['clipfrac']:.3f},{row['lr']:.2e},"
                    f"{row['sps']:.0f}",
                    flush=True,
                )
        wall_time = time.perf_counter() - start

        eval_returns = np.zeros(0)
        if args.eval_episodes > 0:
            max_steps = gym.spec(args.env_id).max_episode_steps or 10_000
            eval_returns = evaluate(sampler, agent, args.eval_episodes, max_steps)
    finally:
        envs.close()

    above = [r["global_step"] for r in curve if r["avg_return"] >= args.threshold]
    reached = above[0] if above else None
    # the step from which the running mean stayed at or above the threshold
    stayed = None
    for r in reversed(curve):
        if not r["avg_return"] >= args.threshold:
            break
        stayed = r["global_step"]
    return {
        "args": {
            k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()
        },
        "curve": curve,
        "episodes": episodes,
        "steps_to_threshold": reached,
        "steps_to_stay_above": stayed,
        "final_avg_return": curve[-1]["avg_return"],
        "eval_returns": eval_returns.tolist(),
        "wall_time": wall_time,
        "sps": global_step / wall_time,
    }


# --------------------------------------------------------------------------- plotting


def plot_curves(runs: Sequence[dict[str, Any]], path: Path) -> None:
    """Episode returns (dots) and their running mean (line) against env steps."""
    import matplotlib  # plotting is optional: import it only when asked

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for i, run in enumerate(runs):
        color = f"C{i}"
        steps = [step for step, _ in run["episodes"]]
        rets = [ret for _, ret in run["episodes"]]
        ax.scatter(steps, rets, s=3, alpha=0.25, color=color, linewidths=0)
        ax.plot(
            [r["global_step"] for r in run["curve"]],
            [r["avg_return"] for r in run["curve"]],
            color=color,
            label=f"seed {run['args']['seed']}",
        )
    threshold = runs[0]["args"].get("threshold", 400.0)
    ax.axhline(threshold, color="grey", linestyle="--", linewidth=1)
    window = runs[0]["args"].get("window", 20)
    ax.set(
        xlabel="environment steps",
        ylabel=f"episode return (line: mean of last {window})",
        title=f"PPO (numpy) on {runs[0]['args']['env_id']} with vecpool",
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
    summary = [
        f"seed {args.seed}: final average return {result['final_avg_return']:.1f} "
        f"(last {args.window} episodes)",
        f"did not reach {args.threshold:g}"
        if reached is None
        else f"reached {args.threshold:g} at step {reached}",
        f"stayed above from step {result['steps_to_stay_above']}",
        f"{result['wall_time']:.1f} s",
        f"{result['sps']:.0f} env steps/s",
    ]
    if result["eval_returns"]:
        summary.append(
            f"evaluation: {np.mean(result['eval_returns']):.1f} "
            f"over {len(result['eval_returns'])} episodes"
        )
    print("; ".join(summary))
    if args.save_json is not None:
        args.save_json.write_text(json.dumps(result, indent=1))
    if args.curve is not None:
        plot_curves([result], args.curve)
    return result


if __name__ == "__main__":
    main()
