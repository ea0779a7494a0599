"""spade_mini: a single-GPU reference implementation of SPADE.

One language model plays two roles. As the designer it writes training environments as
Python source; as the agent it plays them. The agent learns from the environments' reward,
the designer from hint-based regret. Start reading at `train.py`, then `spade_mini/loop.py`.
"""

__version__ = "0.1.0"
