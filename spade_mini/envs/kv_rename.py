from tooluse import ToolUseEnv


class KvRenameEnv(ToolUseEnv):
    """Rename keys (one more each level) and bump a counter in a store."""
    levels = 4

    def _reset(self, rng):
        keys = rng.sample("red blue gold pink gray teal plum lime navy".split()[:3 + 2 * self.level], 2 + 2 * self.level)
        self.renames = list(zip(keys[::2], keys[1::2])) + [("visits", "visits")]  # (old, new) pairs
        self.store = {old: rng.randint(10, 99) for old, _ in self.renames}
        add = rng.randint(2, 9)
        self.goal = {new: self.store[old] for old, new in self.renames}
        self.goal["visits"] += add
        return f"Rename key {', '.join(map(' to '.join, self.renames[:-1]))} and add {add} to visits, then answer done."

    def tool_get(self, key: str):
        """The value under a key."""
        return self.store[key]

    def tool_set(self, key: str, value: int):
        """Store a value under a key."""
        self.store[key] = int(value)
        return "ok"

    def tool_delete(self, key: str):
        """Remove a key."""
        return self.store.pop(key)

    def _check_answer(self, answer):
        return answer == "done" and self.store == self.goal

    def hint(self):
        return "Copy the old key's value to the new key before deleting it."

    def solution(self):
        import json
        def call(name, **arguments):
            return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        moves = []
        for old, new in self.renames:
            moves += [call("get", key=old), call("set", key=new, value=self.goal[new])]
            moves += [call("delete", key=old)] * (old != new)
        return moves + ["<answer>done</answer>"]
