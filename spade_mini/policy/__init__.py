"""The policy: the ONE language model both roles share (it imports nothing else of spade_mini).

    policy.py    Policy (generate, continue_chats, acting_as), Completion, chat_ids (no text of a
                 message becomes a special token)
    load.py      load_policy, policy_from_model, embedded_checkpoint, tiny_model,
                 save_trainable / load_trainable (what a checkpoint holds of the model)
    logprobs.py  Sampling, PLAIN, token_logprobs: log-probs of tokens under the sampler
    decoding.py  decode and ChatCache: lockstep decoding that reuses keys and values
    memplan.py   MemoryPlan, make_plan, ModelShape: every phase's budget on this device, chunking

Other folders use the names below; the files above import each other directly.
"""
from spade_mini.policy.load import (TRAINABLE_FILE, ModelError, embedded_checkpoint, load_policy,
                                    load_trainable, pick_device, pick_dtype, policy_from_model,
                                    save_trainable, tiny_model)
from spade_mini.policy.logprobs import PLAIN, Sampling, left_pad, sampled_logprobs, sampling_support, token_logprobs
from spade_mini.policy.memplan import (KNOWN_SHAPES, MemoryPlan, ModelShape, PlanError, make_plan, out_of_memory,
                                       pack_by_tokens, parse_bytes)
from spade_mini.policy.policy import CHAT_CACHE_BYTES, Completion, Policy, acting_as, chat_ids, continue_chats

__all__ = ["Policy", "Completion", "chat_ids", "acting_as", "continue_chats", "CHAT_CACHE_BYTES", "ModelError",
           "load_policy", "policy_from_model", "embedded_checkpoint", "tiny_model", "pick_device",
           "pick_dtype", "save_trainable", "load_trainable", "TRAINABLE_FILE", "Sampling", "PLAIN",
           "token_logprobs", "sampled_logprobs", "sampling_support", "left_pad", "MemoryPlan", "ModelShape",
           "KNOWN_SHAPES", "PlanError", "make_plan", "out_of_memory", "pack_by_tokens", "parse_bytes"]
