from tooluse import ToolUseEnv


class BankRetryEnv(ToolUseEnv):
    """Make a transfer through a bank API that fails at first (more often each level)."""
    levels = 4

    def _reset(self, rng):
        self.savings, self.amount = rng.randint(10, 90) * 10, rng.randint(2, 9) * 10
        self.outages, self.goal = rng.randint(1 + self.level, 2 + 2 * self.level), self.savings + self.amount
        return (f"Move {self.amount} dollars from checking to savings once; a failed call moves "
                "nothing. Then answer the new savings balance.")

    def tool_transfer(self, amount: int):
        """Move `amount` dollars from checking to savings."""
        if self.outages:
            self.outages -= 1
            raise ConnectionError("503 service unavailable, nothing was moved")
        self.savings += int(amount)
        return "Transfer completed."

    def tool_get_balance(self):
        """The balance of the savings account."""
        return self.savings

    def _check_answer(self, answer):
        return self.savings == self.goal and answer == str(self.goal)

    def hint(self):
        return "Repeat a failed transfer until it completes, then read the savings balance."

    def solution(self):
        import json
        def call(name, **arguments):
            return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        return [call("transfer", amount=self.amount)] * (self.outages + 1) + [
            call("get_balance"), f"<answer>{self.goal}</answer>"]
