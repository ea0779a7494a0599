"""Choose the right tools among several to price the cheapest flight in euros (tool selection)."""
import json

from tooluse import ToolUseEnv

CITIES = ["Lisbon", "Oslo", "Prague", "Dublin", "Vienna", "Athens", "Madrid"]


def call(tool, **arguments):
    """One action string that calls `tool` with `arguments`."""
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


class FlightPriceEnv(ToolUseEnv):
    def _reset(self, rng):
        self.origin, self.destination = rng.sample(CITIES, 2)
        self.flights = [{"flight": f"{rng.choice('ABCDEFG')}{rng.choice('XYZ')}{rng.randint(100, 999)}",
                         "price_usd": rng.randint(80, 400)} for _ in range(rng.randint(3, 5))]
        self.rate = rng.randint(80, 95) / 100  # euros per dollar today
        self.cheapest = min(f["price_usd"] for f in self.flights)
        self.expected = round(self.cheapest * self.rate)
        return (f"What does the cheapest flight from {self.origin} to {self.destination} cost in "
                "euros? Flight prices are quoted in US dollars; use today's exchange rate. Tools: "
                "search_flights, search_hotels, get_weather, convert_currency. Reply "
                "<answer>EUROS</answer> with the price rounded to whole euros.")

    def tool_search_flights(self, origin: str, destination: str):
        """Flights from `origin` to `destination` with their prices in US dollars."""
        if (origin.title(), destination.title()) != (self.origin, self.destination):
            return []
        return self.flights

    def tool_search_hotels(self, city: str):
        """Hotels in `city` with nightly prices in US dollars."""
        return [{"hotel": f"{city.title()} Central", "price_usd": 120},
                {"hotel": f"{city.title()} Budget Inn", "price_usd": 65}]

    def tool_get_weather(self, city: str):
        """Today's weather forecast for `city`."""
        return {"city": city.title(), "forecast": "sunny", "temperature_c": 21}

    def tool_convert_currency(self, amount: float, from_currency: str, to_currency: str):
        """Convert `amount` between "USD" and "EUR" at today's rate."""
        pair = (from_currency.upper(), to_currency.upper())
        if pair == ("USD", "EUR"):
            return {"amount": round(float(amount) * self.rate, 2), "currency": "EUR"}
        if pair == ("EUR", "USD"):
            return {"amount": round(float(amount) / self.rate, 2), "currency": "USD"}
        raise ValueError("only USD and EUR are supported")

    def _check_answer(self, answer):
        try:
            return abs(float(answer.strip().lstrip("€").replace(",", "")) - self.expected) <= 1
        except ValueError:
            return False

    def hint(self):
        return ("Only the flight search and the currency converter matter here: find the lowest "
                "dollar price among the flights, convert exactly that amount to EUR and round it.")

    def solution(self):
        return [call("search_flights", origin=self.origin, destination=self.destination),
                call("convert_currency", amount=self.cheapest, from_currency="USD",
                     to_currency="EUR"),
                f"<answer>{self.expected}</answer>"]
