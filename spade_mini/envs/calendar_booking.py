from tooluse import ToolUseEnv


class CalendarBookingEnv(ToolUseEnv):
    """Book the first free hour of a calendar day and report it."""
    def _reset(self, rng):
        self.busy, self.booked = [9] + rng.sample(range(10, 17), 3), None  # 9 is always busy
        self.free = min(set(range(9, 17)) - set(self.busy))
        return "Book a meeting at today's first free hour (9 to 16), then answer the hour."

    def tool_list_busy(self):
        """Today's busy hours."""
        return self.busy

    def tool_book(self, hour: int):
        """Book a one-hour meeting today."""
        if int(hour) in self.busy:
            raise ValueError(f"{hour} is busy")
        self.booked = int(hour)
        return "Booked."

    def _check_answer(self, answer):
        return self.booked == self.free and answer == str(self.free)

    def hint(self):
        return "List the busy hours, then book the lowest hour not among them."

    def solution(self):
        import json
        def call(name, **arguments):
            return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        return [call("list_busy"), call("book", hour=self.free), f"<answer>{self.free}</answer>"]
