from tooluse import ToolUseEnv


class InventoryOrderEnv(ToolUseEnv):
    """Find a product's id, order it and report the order id."""
    levels = 4

    def _reset(self, rng):
        names = ["lamp", "chair", "desk", "pen", "mug", "sofa", "clock", "rug"]
        look_alikes = ["desk lamp", "pen holder", "mug rack", "sofa bed", "wall clock", "lamp shade"]
        names += look_alikes[:2 * self.level]
        self.ids = {name: rng.randint(100, 999) for name in names}
        self.wanted, self.ordered = rng.choice(names), None
        self.order_id = f"ORD-{rng.randint(1000, 9999)}"
        return f"Order one {self.wanted}, then answer the order id."

    def tool_search_products(self, query: str):
        """Product ids by name."""
        return {name: i for name, i in self.ids.items() if query.lower() in name}

    def tool_place_order(self, product_id: int):
        """Order one product; returns the order id."""
        self.ordered = int(product_id)
        return self.order_id

    def _check_answer(self, answer):
        return self.ordered == self.ids[self.wanted] and answer == self.order_id

    def hint(self):
        return "Search for the product first, then order it by its id."

    def solution(self):
        import json
        def call(name, **arguments):
            return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        return [call("search_products", query=self.wanted),
                call("place_order", product_id=self.ids[self.wanted]),
                f"<answer>{self.order_id}</answer>"]
