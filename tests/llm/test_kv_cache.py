"""The paged KV cache's addressing: block counts, slot mapping through a block table,
the pool's free list and its prefix cache, and a step's flattened inputs."""

from __future__ import annotations

import pytest

from llm.block_pool import BlockPool, chain_hash
from llm.kv_cache import KVCacheManager, prepare_inputs, slot_mapping
from llm.requests import LLMRequest
from llm.sampling import SamplingParams
from llm.step_plan import blocks_for


@pytest.mark.parametrize("num_tokens,block_size,blocks", [(0, 4, 0), (1, 4, 1), (4, 4, 1), (5, 4, 2), (17, 16, 2)])
def test_blocks_hold_every_position(num_tokens, block_size, blocks):
    assert blocks_for(num_tokens, block_size) == blocks


def test_a_slot_is_its_blocks_place_in_the_pool_then_its_offset():
    table = [9, 3]
    assert slot_mapping(table, 0, 8, 4) == [36, 37, 38, 39, 12, 13, 14, 15]
    assert slot_mapping(table, 3, 2, 4) == [39, 12]  # a chunk across a block boundary
    assert slot_mapping(table, 5, 0, 4) == []


def test_the_pool_hands_out_each_block_once_and_takes_them_back():
    pool = BlockPool(4)
    a, b = pool.allocate(3), pool.allocate(1)
    assert sorted(a + b) == [0, 1, 2, 3] and pool.num_free == 0
    with pytest.raises(RuntimeError, match="asked for 1 KV blocks with 0 free"):
        pool.allocate(1)
    pool.free(a)
    assert pool.num_free == 3 and pool.allocate(3) == a[::-1]  # the freed blocks, a request's last first
    with pytest.raises(RuntimeError, match="freed more often than held"):
        pool.free(b + b)


def request(rid: str, prompt: list[int], output: list[int], computed: int, blocks: list[int]) -> LLMRequest:
    req = LLMRequest(rid, prompt, SamplingParams(), 0, 0.0, output_ids=output, num_computed_tokens=computed)
    req.blocks = blocks
    return req


def test_a_steps_inputs_flatten_a_prefill_chunk_and_a_decode():
    chunk = request("p", [10, 11, 12, 13, 14, 15], [], computed=2, blocks=[5, 7])  # computes positions 2..5
    decode = request("d", [20, 21, 22], [23, 24], computed=4, blocks=[1, 6])  # computes position 4
    inputs = prepare_inputs([(chunk, 4), (decode, 1)], block_size=4)
    assert inputs.token_ids == [12, 13, 14, 15, 24] and inputs.num_tokens == 5
    assert inputs.positions == [2, 3, 4, 5, 4]
    assert inputs.slot_mapping == [22, 23, 28, 29, 24]
    assert [(s.start, s.num_tokens, s.context_len, s.block_table) for s in inputs.seqs] == [
        (0, 4, 6, [5, 7]), (4, 1, 5, [1, 6])]
    assert inputs.seqs[0].block_table is not chunk.blocks  # a step's tables do not change with the request's


def test_a_named_block_outlives_its_request_until_it_is_the_oldest_free_one():
    pool = BlockPool(3)
    a = pool.allocate(2)
    names = [chain_hash(None, [1, 2]), chain_hash(chain_hash(None, [1, 2]), [3, 4])]
    for block, name in zip(a, names):
        pool.cache(block, name)
    pool.free(a)
    assert pool.num_free == 3 and pool.lookup(names) == a and pool.free_among(a) == 2
    pool.take(a[:1])  # a new request starts on the first block: it leaves the free list
    assert pool.num_free == 2 and pool.refs[a[0]] == 1
    fresh = pool.allocate(1)  # the never-named block went unused longest
    assert fresh not in a and pool.lookup(names) == a
    pool.allocate(1)  # the only free one left: a's second block, which loses its name
    assert pool.lookup(names) == a[:1]
    assert pool.lookup([names[1]]) == []  # a prefix is found from its start only


def test_a_name_stands_for_the_whole_prefix():
    first = chain_hash(None, [1, 2])
    assert chain_hash(first, [3, 4]) != chain_hash(chain_hash(None, [9, 2]), [3, 4])
    assert chain_hash(first, [3, 4]) == chain_hash(chain_hash(None, [1, 2]), [3, 4]) and len(first) == 16


def test_a_request_finds_the_full_blocks_another_computed_and_leaves_its_last_token_to_compute():
    kv = KVCacheManager(8, block_size=2)
    first = request("a", [5, 6, 7, 8, 9], [], 0, [])
    kv.allocate_slots(first, 3)
    first.num_computed_tokens = 5
    kv.cache_full_blocks(first)  # [5 6] [7 8] are full; [9] is not
    assert first.num_named_blocks == 2
    same = request("b", [5, 6, 7, 8], [], 0, [])
    found, free = kv.lookup(same)
    assert found == first.blocks[:1] and free == 0  # [7 8] holds its last token: computed again
    longer = request("c", [5, 6, 7, 8, 1, 2], [], 0, [])
    found, _ = kv.lookup(longer)
    assert found == first.blocks[:2]
    kv.attach(longer, found)
    assert longer.num_computed_tokens == 4 and kv.pool.refs[found[0]] == 2
    kv.free(first)
    assert kv.pool.refs[found[0]] == 1 and kv.lookup(request("d", [5, 6, 3, 3], [], 0, []))[0] == found[:1]
    off = KVCacheManager(8, block_size=2, caching=False)
    off.allocate_slots(first, 3)
    first.num_computed_tokens = 5
    off.cache_full_blocks(first)
    assert off.lookup(request("e", [5, 6, 7, 8, 1], [], 0, [])) == ([], 0)
