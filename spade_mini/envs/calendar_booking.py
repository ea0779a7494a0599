"""Find the first free hour on a calendar day, book it and report it (multi-step workflow)."""
import json

from tooluse import ToolUseEnv

DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday"]
TITLES = ["standup", "design review", "budget call", "lunch", "interview", "1:1"]


def call(tool, **arguments):
    """One action string that calls `tool` with `arguments`."""
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


class CalendarBookingEnv(ToolUseEnv):
    def _reset(self, rng):
        self.day = rng.choice(DAYS)
        self.title = rng.choice(["project sync", "code review", "planning", "retrospective"])
        self.events = {}
        for day in DAYS:
            busy = rng.sample(range(9, 17), rng.randint(2, 5))
            if day == self.day:  # the first hour is always taken, so the answer is not just 9
                busy = sorted(set(busy) | {9})
            self.events.update({(day, h): rng.choice(TITLES) for h in busy})
        self.first_free = min(h for h in range(9, 17) if (self.day, h) not in self.events)
        self.booked = []
        return (f"Book a one-hour meeting titled '{self.title}' on {self.day} at the earliest free "
                "hour between 9 and 16 (whole hours, 24-hour clock). Book nothing else. Tools: "
                "list_events, create_event. Then reply <answer>HOUR</answer> with the hour booked.")

    def tool_list_events(self, day: str):
        """The events on `day` (monday to friday), each with its start hour; each lasts one hour."""
        if day.lower() not in DAYS:
            raise ValueError("day must be monday to friday")
        return [{"hour": h, "title": t} for (d, h), t in sorted(self.events.items())
                if d == day.lower()]

    def tool_create_event(self, day: str, hour: int, title: str):
        """Book a one-hour event starting at `hour` on `day`."""
        key = (day.lower(), int(hour))
        if key[0] not in DAYS or not 9 <= key[1] <= 16:
            raise ValueError("day must be monday to friday and hour 9 to 16")
        if key in self.events:
            raise ValueError(f"{day} at {hour} is already taken by '{self.events[key]}'")
        self.events[key] = title
        self.booked.append((key, title))
        return {"status": "booked", "day": key[0], "hour": key[1]}

    def _check_answer(self, answer):
        wanted = [((self.day, self.first_free), self.title)]
        return self.booked == wanted and answer.strip() == str(self.first_free)

    def hint(self):
        return ("List the events of that day first, walk the hours upward from 9 to the first one "
                "with no event, create the meeting there with the exact title, then answer the hour.")

    def solution(self):
        return [call("list_events", day=self.day),
                call("create_event", day=self.day, hour=self.first_free, title=self.title),
                f"<answer>{self.first_free}</answer>"]
