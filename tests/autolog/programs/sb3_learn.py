"""The seed's case: a script whose whole training is one library call, Stable-Baselines3's own
quick start (`model.learn(...)`), with no observability code.

    python sb3_learn.py OUT_DIR {ppo,dqn,sac} [--timesteps N]

Writes OUT_DIR/result.json with what SB3 itself counted.
"""

import argparse
import json
import os

from stable_baselines3 import DQN, PPO, SAC

parser = argparse.ArgumentParser()
parser.add_argument("out_dir")
parser.add_argument("algorithm", choices=["ppo", "dqn", "sac"])
parser.add_argument("--timesteps", type=int, default=2048)
args = parser.parse_args()

model: PPO | DQN | SAC
if args.algorithm == "ppo":
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=256, batch_size=64, n_epochs=4, seed=0, device="cpu")
elif args.algorithm == "sac":
    model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=100, seed=0, device="cpu")
else:
    model = DQN("MlpPolicy", "CartPole-v1", learning_starts=200, train_freq=4, seed=0, device="cpu")
model.learn(total_timesteps=args.timesteps)

with open(os.path.join(args.out_dir, "result.json"), "w") as result:
    json.dump({"num_timesteps": model.num_timesteps, "n_updates": model._n_updates}, result)
