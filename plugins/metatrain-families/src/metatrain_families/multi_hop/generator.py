"""multi_hop's example generator: a fresh persona world and a chained relation query over it."""

from __future__ import annotations

import random
from typing import Any

import attrs

from metatrain.specs import Example


def _words(text: str) -> tuple[str, ...]:
    return tuple(text.split())


NAMES = _words(
    "Alice Bruno Chen Dana Elif Farah Goran Hana Ivan Jonas Kemal Lena Marco Nadia Oskar Priya Quinn "
    "Rosa Sven Tara Umar Vera Wei Xenia Yusuf Zoe Amir Beatriz Carlos Dmitri Emma Felix Greta Hugo "
    "Ines Jamal Keiko Luca Maya Nils Olga Pablo Rania Stefan Tomas Ursula Viktor Wanda Yara Zeno"
)
CITIES = _words(
    "Lisbon Oslo Nairobi Lima Osaka Krakow Quito Dublin Porto Hanoi Tunis Riga Perth Bergen Seville "
    "Leeds Turin Austin Busan Cusco Ghent Malmo Tartu Split Varna Cork Graz Lyon Bari Izmir Fukuoka "
    "Dakar Accra Recife Rosario Hobart Tromso Aarhus Utrecht Bilbao"
)
JOBS = _words(
    "baker nurse pilot chemist plumber teacher architect librarian carpenter dentist editor farmer "
    "geologist jeweller translator"
)
RELATIONS = {"manager": "manager", "best_friend": "best friend"}


@attrs.frozen
class Difficulty:
    """Knobs of the generator."""

    n_people: int
    hops: int
    """Relations followed from the start person (each one a tool call)."""
    attributes: tuple[str, ...]
    """What the question asks about the last person: name, city or job (one more call unless name)."""
    guided: bool = False
    """Whether the prompt also lists the lookups in the order they are made (a calibration knob)."""


def make_world(rng: random.Random, n_people: int) -> dict[str, Any]:
    """People with an age, job, city, a manager and a best friend (never themselves)."""
    names = rng.sample(NAMES, n_people)
    people = []
    for name in names:
        others = [n for n in names if n != name]
        people.append(
            {
                "name": name,
                "age": rng.randint(21, 68),
                "job": rng.choice(JOBS),
                "city": rng.choice(CITIES),
                "manager": rng.choice(others),
                "best_friend": rng.choice(others),
            }
        )
    return {"people": people}


def phrase(relations: list[str], start: str) -> str:
    """``["best_friend", "manager"]`` -> "the manager of the best friend of Start"."""
    out = start
    for rel in relations:
        out = f"the {RELATIONS[rel]} of {out}"
    return out


def question(relations: list[str], start: str, attribute: str) -> str:
    subject = phrase(relations, start)
    if attribute == "city":
        return f"In which city does {subject} live?"
    if attribute == "job":
        return f"What is the job of {subject}?"
    return f"Who is {subject}?"


def steps(relations: list[str], start: str, attribute: str) -> str:
    """The lookups in the order they are made: "First find the best friend of Alice. Then find the
    manager of that person."; a city or job asked for is one more step."""
    wanted = [RELATIONS[r] for r in relations] + ([attribute] if attribute != "name" else [])
    said = [f"First find the {wanted[0]} of {start}."]
    said += [f"Then find the {w} of that person." for w in wanted[1:]]
    return " ".join(said)


def one_lookup_away(person: dict[str, Any]) -> set[str]:
    """What one lookup on ``person`` shows (city, job, manager, best friend), casefolded."""
    return {str(v).casefold() for k, v in person.items() if k not in ("name", "age")}


def generate_example(rng: random.Random, d: Difficulty, example_id: str) -> Example:
    """One query: the world, the relation path, the people visited and the answer.

    The path never visits a person twice: a path back to a person the prompt names (e.g. the best
    friend of the best friend of Alice being Alice) would make that name a tool-free guess. Past one
    hop, the answer is none of the start person's own facts, so one lookup on the name the prompt
    gives never answers (in 1.3.0's ``fast`` worlds of 8 it answered 0.062 of the eval).
    """
    while True:
        world = make_world(rng, d.n_people)
        by_name = {p["name"]: p for p in world["people"]}
        start = rng.choice(sorted(by_name))
        relations = [rng.choice(sorted(RELATIONS)) for _ in range(d.hops)]
        chain: list[str] = []
        person = start
        for rel in relations:
            person = by_name[person][rel]
            chain.append(person)
        attribute = rng.choice(d.attributes)
        answer = person if attribute == "name" else str(by_name[person][attribute])
        revisits = len({start, *chain}) < d.hops + 1
        if not revisits and (d.hops == 1 or answer.casefold() not in one_lookup_away(by_name[start])):
            break
    guide = f" {steps(relations, start, attribute)}" if d.guided else ""
    prompt = (
        f"{question(relations, start, attribute)}{guide} Look up each step with the tools and reply "
        "with the final answer as <answer>ANSWER</answer>."
    )
    return Example(
        id=example_id,
        prompt=prompt,
        answer=answer,
        info={
            "world": world,
            "query": {"start": start, "relations": relations, "attribute": attribute},
            "chain": chain,
        },
    )
