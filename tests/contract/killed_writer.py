"""A writer for the chaos test: appends transactional batches forever until it is killed.

Run as ``python -m tests.contract.killed_writer LOG_URL TOPIC TXN_ID BATCH``; prints ``committed N``
after each batch so the test can SIGKILL it in the middle of the next one.
"""

from __future__ import annotations

import asyncio
import sys

from events.log import OutRecord, open_log


async def main(url: str, topic: str, txn_id: str, size: int) -> None:
    log = open_log(url)
    await log.start()
    producer = await log.producer(txn_id)
    batch = 0
    while True:
        async with producer.transaction() as tx:
            for start in range(0, size, 100):
                await tx.append(
                    [
                        OutRecord(topic, value=f"{batch}:{i}:{size}".encode(), key=f"k{i % 7}".encode())
                        for i in range(start, min(size, start + 100))
                    ]
                )
        print(f"committed {batch}", flush=True)
        batch += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
