"""Search a catalogue, get a price quote and place an order from it (API orchestration)."""
import json

from tooluse import ToolUseEnv

PRODUCTS = ["desk lamp", "office chair", "notebook", "stapler", "monitor stand", "keyboard"]
COLOURS = ["black", "white", "red"]


def call(tool, **arguments):
    """One action string that calls `tool` with `arguments`."""
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


class InventoryOrderEnv(ToolUseEnv):
    def _reset(self, rng):
        self.product, self.colour = rng.choice(PRODUCTS), rng.choice(COLOURS)
        self.quantity = rng.randint(2, 6)
        numbers = rng.sample(range(100, 1000), len(PRODUCTS) * len(COLOURS))
        self.catalogue = {f"SKU-{numbers.pop()}": (p, c, rng.randint(3, 40))
                          for p in PRODUCTS for c in COLOURS}
        self.quotes, self.orders = {}, {}
        self.next_quote, self.next_order = rng.randint(100, 999), rng.randint(1000, 9999)
        return (f"Order {self.quantity} units of the {self.colour} {self.product}. An order must "
                "be placed from a price quote. Tools: search_products, get_quote, place_order. "
                "When the order is placed, reply <answer>ORDER_ID</answer> with its order id.")

    def tool_search_products(self, query: str):
        """Find catalogue items matching every word of the query; returns sku, name, colour, price."""
        words = query.lower().split()
        return [{"sku": sku, "name": p, "colour": c, "unit_price": price}
                for sku, (p, c, price) in self.catalogue.items() if all(w in f"{c} {p}" for w in words)]

    def tool_get_quote(self, sku: str, quantity: int):
        """Price `quantity` units of `sku`; returns a quote id to order with."""
        if sku not in self.catalogue:
            raise KeyError(f"no product with sku {sku}")
        quote_id = f"Q-{self.next_quote + len(self.quotes)}"
        self.quotes[quote_id] = (sku, int(quantity))
        return {"quote_id": quote_id, "total": self.catalogue[sku][2] * int(quantity)}

    def tool_place_order(self, quote_id: str):
        """Place an order from a quote id; returns the order id."""
        if quote_id not in self.quotes:
            raise KeyError(f"unknown quote {quote_id}")
        order_id = f"ORD-{self.next_order + len(self.orders)}"
        self.orders[order_id] = self.quotes[quote_id]
        return {"order_id": order_id, "status": "placed"}

    def target_sku(self):
        return next(s for s, (p, c, _) in self.catalogue.items()
                    if (p, c) == (self.product, self.colour))

    def _check_answer(self, answer):
        return self.orders.get(answer.strip().upper()) == (self.target_sku(), self.quantity)

    def hint(self):
        return ("Search by the product name, pick the sku with the right colour, request a quote "
                "for the exact quantity, order with that quote id and answer the order id.")

    def solution(self):
        return [call("search_products", query=self.product),
                call("get_quote", sku=self.target_sku(), quantity=self.quantity),
                call("place_order", quote_id=f"Q-{self.next_quote}"),
                f"<answer>ORD-{self.next_order}</answer>"]
