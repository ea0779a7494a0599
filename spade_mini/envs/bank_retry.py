"""Make a bank transfer through an API that fails at first and must be retried (error recovery)."""
import json

from tooluse import ToolUseEnv


def call(tool, **arguments):
    """One action string that calls `tool` with `arguments`."""
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


class BankRetryEnv(ToolUseEnv):
    def _reset(self, rng):
        self.balances = {"checking": rng.randint(20, 90) * 10, "savings": rng.randint(5, 60) * 10}
        self.amount = rng.randint(2, 15) * 10
        self.failures = rng.randint(1, 2)  # outages before the service answers
        self.transfers = 0
        return (f"Transfer {self.amount} dollars from the checking account to the savings account, "
                "exactly once. The bank service is unreliable: if a call fails, nothing happened "
                "and you may retry. Tools: transfer, get_balance. Then reply "
                "<answer>BALANCE</answer> with the new savings balance as a number.")

    def tool_transfer(self, from_account: str, to_account: str, amount: int):
        """Move `amount` dollars between two accounts ("checking" or "savings")."""
        if self.failures > 0:
            self.failures -= 1
            return "Error: 503 service temporarily unavailable. No money was moved; try again."
        if from_account not in self.balances or to_account not in self.balances:
            raise KeyError("accounts are 'checking' and 'savings'")
        if int(amount) <= 0 or int(amount) > self.balances[from_account]:
            raise ValueError("invalid amount")
        self.balances[from_account] -= int(amount)
        self.balances[to_account] += int(amount)
        self.transfers += 1
        return {"status": "completed", "amount": int(amount)}

    def tool_get_balance(self, account: str):
        """The current balance of "checking" or "savings"."""
        if account not in self.balances:
            raise KeyError("accounts are 'checking' and 'savings'")
        return {"account": account, "balance": self.balances[account]}

    def _check_answer(self, answer):
        return self.transfers == 1 and answer.strip().lstrip("$") == str(self.balances["savings"])

    def hint(self):
        return ("A failed transfer changed nothing, so repeat the same call until it reports "
                "completed, then stop transferring, read the savings balance and answer it.")

    def solution(self):
        move = call("transfer", from_account="checking", to_account="savings", amount=self.amount)
        final = self.balances["savings"] + self.amount
        return [move] * (self.failures + 1) + [call("get_balance", account="savings"),
                                               f"<answer>{final}</answer>"]
