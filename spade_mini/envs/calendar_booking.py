from tooluse import ToolUseEnv


class CalendarBookingEnv(ToolUseEnv):
    """Book the first free hours of a calendar day (one more each level) and report them."""
    levels = 4

    def _reset(self, rng):
        n, (end, busy) = 1 + self.level, [(16, 3), (18, 6), (20, 7), (22, 8)][self.level]  # meetings, last hour, busy
        self.busy, self.booked = [9] + rng.sample(range(10, end + 1), busy), set()  # 9 is always busy
        self.free = sorted(set(range(9, end + 1)) - set(self.busy))[:n]
        self.answer = ",".join(map(str, self.free))
        if n == 1:
            return "Book a meeting at today's first free hour (9 to 16), then answer the hour."
        return f"Book {n} meetings at today's first {n} free hours (9 to {end}), then answer them like 10,12."

    def tool_list_busy(self):
        """Today's busy hours."""
        return self.busy

    def tool_book(self, hour: int):
        """Book a one-hour meeting today."""
        if int(hour) in self.busy:
            raise ValueError(f"{hour} is busy")
        self.booked.add(int(hour))
        return "Booked."

    def _check_answer(self, answer):
        return self.booked == set(self.free) and answer == self.answer

    def hint(self):
        return "List the busy hours, then book the lowest hour not among them."

    def solution(self):
        import json
        def call(name, **arguments):
            return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"
        return [call("list_busy")] + [call("book", hour=hour) for hour in self.free] + [f"<answer>{self.answer}</answer>"]
