"""Chain directory look-ups to find an employee's manager's email (data retrieval)."""
import json

from tooluse import ToolUseEnv

FIRST = ["Ada", "Ben", "Cleo", "Dev", "Eva", "Femi", "Gus", "Hana", "Ivan", "Jia"]
LAST = ["Moreau", "Okafor", "Lindqvist", "Tanaka", "Silva", "Novak", "Haddad", "Kowalski"]


def call(tool, **arguments):
    """One action string that calls `tool` with `arguments`."""
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


class ManagerLookupEnv(ToolUseEnv):
    def _reset(self, rng):
        names = [f"{f} {l}" for f, l in zip(rng.sample(FIRST, 8), rng.sample(LAST, 8))]
        ids = [f"E{n}" for n in rng.sample(range(100, 1000), 8)]
        self.staff = {}
        for i, (eid, name) in enumerate(zip(ids, names)):
            manager = None if i < 2 else ids[rng.randint(0, i - 1)]  # earlier staff manage later
            email = f"{name.split()[0][0].lower()}.{name.split()[1].lower()}{rng.randint(1, 99)}@corp.example"
            self.staff[eid] = {"name": name, "manager_id": manager, "email": email,
                               "department": rng.choice(["sales", "research", "support"])}
        self.employee = ids[rng.randint(2, 7)]
        self.manager = self.staff[self.employee]["manager_id"]
        return (f"What is the email address of the manager of {self.staff[self.employee]['name']}? "
                "Tools: find_employee, get_employee. Reply <answer>EMAIL</answer> with the address.")

    def tool_find_employee(self, name: str):
        """Search the directory by (part of) a person's name; returns ids and departments."""
        return [{"employee_id": eid, "name": p["name"], "department": p["department"]}
                for eid, p in self.staff.items() if name.lower() in p["name"].lower()]

    def tool_get_employee(self, employee_id: str):
        """The record of one employee: name, email and manager_id."""
        if employee_id not in self.staff:
            raise KeyError(f"no employee {employee_id}")
        return {"employee_id": employee_id, **self.staff[employee_id]}

    def _check_answer(self, answer):
        return answer.strip().lower() == self.staff[self.manager]["email"]

    def hint(self):
        return ("Find the employee's id by name, read their record to get the manager_id, then "
                "read the manager's record and answer the email address from it.")

    def solution(self):
        name = self.staff[self.employee]["name"]
        return [call("find_employee", name=name), call("get_employee", employee_id=self.employee),
                call("get_employee", employee_id=self.manager),
                f"<answer>{self.staff[self.manager]['email']}</answer>"]
