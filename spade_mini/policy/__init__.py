"""The policy: the ONE language model both roles share (it imports nothing else of spade_mini).

    policy.py    Policy (generate, continue_chats, generate_until, acting_as), Completion
    protocol.py  Roles: what the roles and the update need of it; BareModel: a module alone
    scripted.py  ScriptedDesigner, ScriptedPlayer: the stand-ins for tests and notebooks
    chat.py      chat_ids: a chat's prompt tokens (no text of a message becomes a special token)
    load.py      load_policy, policy_from_model, embedded_checkpoint, tiny_model,
                 save_trainable / load_trainable (what a checkpoint holds of the model), make_optimizer
    logprobs.py  Sampling, PLAIN, token_logprobs: log-probs of tokens under the sampler
    decoding.py  decode and ChatCache: lockstep decoding that reuses keys and values
    models.py    MODELS: the built-in models (--model names), their pins and hashes, and the
                 offline installer (its command: `python -m spade_mini.install NAME`)
    memplan.py   MemoryPlan, make_plan, ModelShape, Need: every phase's budget on this device (on a
                 CPU by the run's need)
    chunks.py    chunk_rows, pack_by_tokens: generation calls and updates cut within the plan
    dtypes.py    --dtype auto on a CPU: bfloat16 only where it measured faster

Other folders use the names below; the files above import each other directly.
"""
from spade_mini.policy.load import (TRAINABLE_FILE, ModelError, embedded_checkpoint, load_policy,
                                    load_trainable, make_optimizer, pick_device, pick_dtype,
                                    policy_from_model, save_trainable, tiny_model)
from spade_mini.policy.logprobs import PLAIN, Sampling, left_pad, sampled_logprobs, sampling_support, token_logprobs
from spade_mini.policy.chunks import chunk_rows, pack_by_tokens
from spade_mini.policy.memplan import (KNOWN_SHAPES, MemoryPlan, ModelShape, Need, PlanError, make_plan, out_of_memory,
                                       parse_bytes)
from spade_mini.policy.models import MODELS, BuiltinModel
from spade_mini.policy.chat import chat_ids
from spade_mini.policy.policy import CHAT_CACHE_BYTES, Completion, Policy
from spade_mini.policy.protocol import BareModel, Roles
from spade_mini.policy.scripted import ScriptedDesigner, ScriptedPlayer

__all__ = ["MODELS", "BuiltinModel", "Policy", "Roles", "BareModel", "ScriptedDesigner", "ScriptedPlayer", "Completion", "chat_ids", "CHAT_CACHE_BYTES", "ModelError",
           "load_policy", "policy_from_model", "embedded_checkpoint", "tiny_model", "pick_device",
           "pick_dtype", "save_trainable", "load_trainable", "TRAINABLE_FILE", "Sampling", "PLAIN",
           "token_logprobs", "sampled_logprobs", "sampling_support", "left_pad", "MemoryPlan", "ModelShape",
           "KNOWN_SHAPES", "PlanError", "Need", "make_plan", "out_of_memory", "chunk_rows", "pack_by_tokens",
           "parse_bytes", "make_optimizer"]
