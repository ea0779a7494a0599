"""Refund the items of an order that are still inside their return window (multi-step workflow)."""
import json

from tooluse import ToolUseEnv

CATEGORIES = {"electronics": 14, "clothing": 30, "books": 7, "toys": 21, "kitchen": 10}
ITEMS = {"electronics": ["headphones", "charger"], "clothing": ["jacket", "scarf"],
         "books": ["novel", "atlas"], "toys": ["puzzle", "kite"], "kitchen": ["kettle", "pan"]}


def call(tool, **arguments):
    """One action string that calls `tool` with `arguments`."""
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


class RefundFlowEnv(ToolUseEnv):
    def _reset(self, rng):
        self.order_id = f"A{rng.randint(10000, 99999)}"
        while True:  # some but not all items must still be refundable
            self.days = rng.randint(5, 28)
            self.items = [{"item": rng.choice(ITEMS[c]), "category": c, "price": rng.randint(8, 90)}
                          for c in rng.sample(sorted(CATEGORIES), 3)]
            eligible = [i for i in self.items if self.days <= CATEGORIES[i["category"]]]
            if 0 < len(eligible) < len(self.items):
                break
        self.expected = sum(i["price"] for i in eligible)
        self.refunds = []
        return (f"A customer asks for a refund of order {self.order_id}. Refund, in one refund, "
                "the total price of the items that are still within their category's return "
                "window (days since purchase <= window days). Tools: get_order, get_return_policy, "
                "issue_refund. Then reply <answer>AMOUNT</answer> with the amount refunded.")

    def tool_get_order(self, order_id: str):
        """An order's items (name, category, price in dollars) and days since purchase."""
        if order_id.strip().upper() != self.order_id:
            raise KeyError(f"no order {order_id}")
        return {"order_id": self.order_id, "days_since_purchase": self.days, "items": self.items}

    def tool_get_return_policy(self, category: str):
        """The return window in days for a product category."""
        if category.lower() not in CATEGORIES:
            raise KeyError(f"unknown category {category}; known: {', '.join(sorted(CATEGORIES))}")
        return {"category": category.lower(), "return_window_days": CATEGORIES[category.lower()]}

    def tool_issue_refund(self, order_id: str, amount: int):
        """Refund `amount` dollars on an order."""
        if order_id.strip().upper() != self.order_id:
            raise KeyError(f"no order {order_id}")
        self.refunds.append(int(amount))
        return {"status": "refunded", "amount": int(amount)}

    def _check_answer(self, answer):
        return self.refunds == [self.expected] and answer.strip().lstrip("$") == str(self.expected)

    def hint(self):
        return ("Read the order, look up the return window of each item's category, keep the items "
                "whose window is at least the days since purchase, refund their sum once, answer it.")

    def solution(self):
        policies = [call("get_return_policy", category=i["category"]) for i in self.items]
        return ([call("get_order", order_id=self.order_id)] + policies
                + [call("issue_refund", order_id=self.order_id, amount=self.expected),
                   f"<answer>{self.expected}</answer>"])
