from tooluse import ToolUseEnv


class KvRenameEnv(ToolUseEnv):
    """Rename a key and bump a counter in a store."""
    def _reset(self, rng):
        old, new = rng.sample(["red", "blue", "gold"], 2)
        self.store = {old: rng.randint(10, 99), "visits": rng.randint(10, 99)}
        add = rng.randint(2, 9)
        self.goal = {new: self.store[old], "visits": self.store["visits"] + add}
        return f"Rename key {old} to {new} and add {add} to visits, then answer done."

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
        old, = set(self.store) - {"visits"}
        new, = set(self.goal) - {"visits"}
        return [call("get", key=old), call("set", key=new, value=self.store[old]),
                call("delete", key=old), call("get", key="visits"),
                call("set", key="visits", value=self.goal["visits"]), "<answer>done</answer>"]
