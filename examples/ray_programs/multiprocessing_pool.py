"""Port multiprocessing code to a cluster with ray.util.multiprocessing.Pool.

A word count written for multiprocessing.Pool: only the import changes. The pool's processes
are actors; each loads a stop-word list once in its initializer. map and starmap return results
in input order; imap_unordered returns them as they finish, so the driver sorts them; an
apply_async call reports back through a callback; a failing call's exception reaches the
caller as itself.
"""

import os

from ray.util.multiprocessing import Pool

DOCUMENTS = [
    "the quick brown fox jumps over the lazy dog",
    "a journey of a thousand miles begins with a single step",
    "to be or not to be that is the question",
    "all that glitters is not gold",
    "the early bird catches the worm",
    "actions speak louder than words",
]


def load_stop_words(words):
    # The initializer and the mapped functions are shipped separately, so they meet through the
    # process's environment rather than through module globals.
    os.environ["WORDCOUNT_STOP_WORDS"] = ",".join(words)


def count_words(document):
    stop_words = set(os.environ["WORDCOUNT_STOP_WORDS"].split(","))
    return len([word for word in document.split() if word not in stop_words])


def longest_word(index, document):
    return index, max(document.split(), key=len)


def word_at(document, position):
    return document.split()[position]


def main():
    with Pool(processes=2, initializer=load_stop_words, initargs=(["the", "a", "of", "to", "is"],)) as pool:
        counts = pool.map(count_words, DOCUMENTS, chunksize=2)
        print("words per document (stop words left out):", counts)
        print("total:", sum(counts))

        longest = pool.starmap(longest_word, enumerate(DOCUMENTS))
        print("longest words:", [word for _, word in longest])

        lengths = sorted(pool.imap_unordered(len, (document for document in DOCUMENTS)))
        print("document lengths, sorted:", lengths)

        received = []
        pool.apply_async(word_at, (DOCUMENTS[0], 3), callback=received.append).get(timeout=60)
        print("fourth word of the first document:", received)

        try:
            pool.apply(word_at, (DOCUMENTS[3], 99))
        except IndexError as error:
            print("a failing call raises", type(error).__name__)


if __name__ == "__main__":
    main()
