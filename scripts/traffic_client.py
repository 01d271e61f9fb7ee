"""An application in front of `gym serve`, for scripts/traffic-demo.

It asks letter-counting questions through the real OpenAI Python client, keeps each response's
`x-request-id`, and sends `POST /v1/feedback` the way an application with a few kinds of users
would: for most answers the application knows the right count and sends it as a `reference`;
for some a user only clicks thumbs up or down; some answers get no feedback at all. The words,
letters and who gives which feedback come from a fixed seed, so two runs ask the same questions.

Usage: traffic_client.py BASE_URL API_KEY COUNT
"""

import json
import random
import re
import sys
import urllib.request

from openai import OpenAI

WORDS = [
    "strawberry", "banana", "committee", "mississippi", "bookkeeper", "parallel", "occurrence",
    "balloon", "coffee", "assessment", "butterfly", "accommodate", "embarrass", "necessary",
    "possession", "raspberry", "tomorrow", "successful", "address", "beginning", "millennium",
    "pepper", "grasshopper", "lollipop", "hippopotamus", "tennessee", "referee", "broccoli",
    "cinnamon", "giraffe", "marshmallow", "pineapple", "Philippines", "assassin", "dilemma",
    "vacuum", "bubble", "rhythm", "zucchini", "spaghetti",
]

PHRASINGS = [
    "How many times does the letter '{letter}' appear in the word '{word}'?",
    "Count the letter '{letter}' in '{word}'. How many are there?",
    "In the word \"{word}\", how many {letter}'s are there?",
]


def questions(count, rng):
    asked = []
    for _ in range(count):
        word = rng.choice(WORDS)
        letter = rng.choice(sorted(set(word.lower())))
        phrasing = rng.choice(PHRASINGS)
        asked.append((phrasing.format(letter=letter, word=word), word.lower().count(letter)))
    return asked


def numbers(text):
    return [int(n) for n in re.findall(r"\b\d+\b", text)]


def post_feedback(base_url, key, body):
    request = urllib.request.Request(
        base_url + "/feedback",
        data=json.dumps(body).encode(),
        headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        return json.load(response)


def main():
    base_url, key, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(20261125)
    client = OpenAI(base_url=base_url, api_key=key)
    kinds = {"reference": 0, "thumbs up": 0, "thumbs down": 0, "none": 0}
    right = 0
    for question, count_right in questions(count, rng):
        raw = client.chat.completions.with_raw_response.create(
            model="gym@letters-live",
            messages=[{"role": "user", "content": question}],
            max_tokens=96,
            temperature=0.5,
        )
        request_id = raw.headers["x-request-id"]
        answer = raw.parse().choices[0].message.content or ""
        found = numbers(answer)
        correct = bool(found) and found[-1] == count_right
        right += correct
        draw = rng.random()
        if draw < 0.6:
            kind, body = "reference", {"request_id": request_id, "reference": str(count_right)}
        elif draw < 0.8:
            kind = "thumbs up" if correct else "thumbs down"
            body = {"request_id": request_id, "thumbs": "up" if correct else "down"}
        else:
            kind, body = "none", None
        if body is not None:
            recorded = post_feedback(base_url, key, body)
            assert recorded["logged"], recorded
        kinds[kind] += 1
    print(
        f"asked {count} questions; served answers right: {right}/{count}; feedback: "
        + ", ".join(f"{kind} {n}" for kind, n in kinds.items())
    )


if __name__ == "__main__":
    main()
