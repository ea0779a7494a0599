"""Rename a key and update a counter in a key-value store; the final state is checked
(state modification)."""
import json

from tooluse import ToolUseEnv

NAMES = ["alice", "bruno", "chen", "dana", "emil", "fatima", "gita", "hugo"]


def call(tool, **arguments):
    """One action string that calls `tool` with `arguments`."""
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


class KvRenameEnv(ToolUseEnv):
    def _reset(self, rng):
        old, new = rng.sample(NAMES, 2)
        self.old, self.new = f"user:{old}", f"user:{new}"
        self.store = {f"user:{n}": f"token-{rng.randint(1000, 9999)}" for n in NAMES if n != new}
        self.store["visits"] = str(rng.randint(10, 99))
        self.add = rng.randint(2, 9)
        self.expected = dict(self.store)
        self.expected[self.new] = self.expected.pop(self.old)
        self.expected["visits"] = str(int(self.store["visits"]) + self.add)
        return (f"In the key-value store, rename the key '{self.old}' to '{self.new}' (same value, "
                f"the old key removed) and increase the number stored under 'visits' by {self.add}. "
                "Leave every other key unchanged. Tools: get, set, delete, list_keys. Reply "
                "<answer>done</answer> when finished; the store is checked then.")

    def tool_get(self, key: str):
        """The value stored under `key`."""
        if key not in self.store:
            raise KeyError(f"no key {key!r}")
        return {"key": key, "value": self.store[key]}

    def tool_set(self, key: str, value: str):
        """Store `value` (a string) under `key`, replacing any old value."""
        self.store[key] = str(value)
        return {"ok": True}

    def tool_delete(self, key: str):
        """Remove `key` from the store."""
        if self.store.pop(key, None) is None:
            raise KeyError(f"no key {key!r}")
        return {"ok": True}

    def tool_list_keys(self):
        """All keys in the store."""
        return sorted(self.store)

    def _check_answer(self, answer):
        return answer.strip().lower() == "done" and self.store == self.expected

    def hint(self):
        return ("Read the old key's value and copy it to the new key before deleting the old one; "
                "read the counter, add to it yourself and write back the sum as a string.")

    def solution(self):
        return [call("get", key=self.old), call("set", key=self.new, value=self.store[self.old]),
                call("delete", key=self.old), call("get", key="visits"),
                call("set", key="visits", value=self.expected["visits"]), "<answer>done</answer>"]
