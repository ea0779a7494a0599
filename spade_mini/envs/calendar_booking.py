from tooluse import ToolUseEnv


class CalendarBookingEnv(ToolUseEnv):
    """Book the first free hours of a calendar day (one more each level) and report them."""
    levels = 4

    def _reset(self, rng):
        n, (hours, busy) = 1 + self.level, [(7, 3), (9, 6), (11, 7), (13, 8)][self.level]  # meetings, hours, busy
        start = rng.randint(5, 13 - 2 * self.level)  # the day's first hour: more tasks
        self.busy, self.booked = [start] + rng.sample(range(start + 1, start + hours + 1), busy), set()
        self.free = sorted(set(range(start, start + hours + 1)) - set(self.busy))[:n]
        self.answer = ",".join(map(str, self.free))
        return f"Book {n} meeting(s) at the first free hour(s) from {start} to {start + hours}, then answer them like 10,12."

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
