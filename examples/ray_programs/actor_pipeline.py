"""A three-stage pipeline of actors that hands ObjectRefs from one stage to the next.

Stage 1 (Reader) produces records; the driver never fetches them, it passes the refs on.
Stage 2 (Cleaner) receives some refs as direct arguments, which Ray resolves to values before the
method runs, and others nested inside a list or dict, which arrive as ObjectRefs that the actor
fetches itself with ray.get. Stage 3 (Aggregator) receives the stage-2 refs, nested in a list,
(some nested inside a list, one produced by an intermediate task) and keeps running totals; the
driver prints its summary.
"""

import ray

DOCUMENTS = [
    "The quick brown fox jumps over the lazy dog",
    "Ray actors keep state between method calls",
    "ObjectRefs can be passed to other tasks and actors",
    "A pipeline passes references instead of values",
    "Nested references are not resolved automatically",
    "the end of the corpus is near",
]


@ray.remote
class Reader:
    def __init__(self, documents):
        self.documents = documents

    def read(self, index):
        return {"id": index, "text": self.documents[index]}

    def read_batch(self, indices):
        # Put each record in the object store from inside the actor and return the refs.
        return [ray.put(self.read(i)) for i in indices]


@ray.remote
class Cleaner:
    def __init__(self, stopwords):
        self.stopwords = set(stopwords)
        self.calls = 0

    def _clean(self, record):
        words = [w.lower() for w in record["text"].split()]
        return {"id": record["id"], "words": [w for w in words if w not in self.stopwords]}

    def clean(self, record):
        # A top-level ObjectRef argument arrives here as its value.
        self.calls += 1
        assert isinstance(record, dict), type(record)
        return self._clean(record)

    def clean_nested(self, batch):
        # ObjectRefs nested in a list or dict are passed through as refs.
        self.calls += 1
        refs = batch["records"]
        kinds = sorted({type(ref).__name__ for ref in refs})
        return {"nested_kinds": kinds, "cleaned": [self._clean(record) for record in ray.get(refs)]}

    def num_calls(self):
        return self.calls


@ray.remote
class Aggregator:
    def __init__(self):
        self.word_counts = {}
        self.documents = set()

    def add(self, cleaned_refs):
        for cleaned in ray.get(cleaned_refs):
            self.documents.add(cleaned["id"])
            for word in cleaned["words"]:
                self.word_counts[word] = self.word_counts.get(word, 0) + 1
        return len(self.documents)

    def add_all(self, cleaned_list):
        # A top-level ref to a list: the list arrives as a value.
        for cleaned in cleaned_list:
            self.documents.add(cleaned["id"])
            for word in cleaned["words"]:
                self.word_counts[word] = self.word_counts.get(word, 0) + 1
        return len(self.documents)

    def summary(self, top):
        ranked = sorted(self.word_counts.items(), key=lambda item: (-item[1], item[0]))
        return {
            "documents": sorted(self.documents),
            "distinct_words": len(self.word_counts),
            "total_words": sum(self.word_counts.values()),
            "top": ranked[:top],
        }


@ray.remote
def unwrap(batch_result):
    return batch_result["cleaned"]


def main():
    ray.init(num_cpus=2)
    reader = Reader.remote(DOCUMENTS)
    cleaner = Cleaner.remote(["the", "a", "are", "and", "to", "of", "is"])
    aggregator = Aggregator.remote()

    # Stage 1 -> stage 2, one ref per call, passed as a top-level argument.
    record_refs = [reader.read.remote(i) for i in range(3)]
    cleaned_refs = [cleaner.clean.remote(ref) for ref in record_refs]

    # Stage 1 returns a list of refs it created; stage 2 gets them nested in a dict.
    nested_refs = ray.get(reader.read_batch.remote([3, 4, 5]))
    print("stage 1 batch returned", len(nested_refs), "refs:", all(isinstance(r, ray.ObjectRef) for r in nested_refs))
    batch_result_ref = cleaner.clean_nested.remote({"records": nested_refs})
    print("nested arguments arrived as:", ray.get(batch_result_ref)["nested_kinds"])

    # Stage 2 -> stage 3: refs nested in a list, never fetched by the driver ...
    print("documents after first add:", ray.get(aggregator.add.remote(cleaned_refs)))
    # ... and a task's output ref passed top-level to the next actor call.
    print("documents after second add:", ray.get(aggregator.add_all.remote(unwrap.remote(batch_result_ref))))

    summary = ray.get(aggregator.summary.remote(top=5))
    print("cleaner calls:", ray.get(cleaner.num_calls.remote()))
    print("documents:", summary["documents"])
    print("distinct words:", summary["distinct_words"])
    print("total words:", summary["total_words"])
    for word, count in summary["top"]:
        print(f"  {word}: {count}")
    ray.shutdown()


if __name__ == "__main__":
    main()
