"""spade_mini: a single-GPU reference implementation of SPADE.

One language model plays two roles. As the designer it writes training environments as
Python source; as the agent it plays them. The agent learns from the environments' reward,
the designer from hint-based regret. Start reading at `train.py`, then `spade_mini/loop.py`.

Importing the package registers the bundled environments with gymnasium (`spade_mini/<Name>-v0`,
held-out ones as `spade_mini_heldout/<Name>-v0`); `register_suite(folder)` registers a suite
exported from a run (spade_mini/adapters/registration.py). Registration starts no process.

Shape legend, for every tensor comment in the package (`x = ...  # (B, T)`):
    B  sequences (rows) of a batch            T  token positions of a padded batch
    C  completion positions with log-probs    L  tokens of one completion
    N  positions with log-probs of a batch    n  positions of one chunk
    H  hidden size                            V  vocabulary size
    R  cached key/value positions             S  prompt positions still to prefill
    h  key/value heads                        d  head size
    k  tokens that top-k keeps
"""
from spade_mini.adapters.registration import register_bundled, register_suite

__version__ = "0.1.0"
__all__ = ["register_suite", "register_bundled"]

register_bundled()
