/* Internal to the jsonrpc module (and its tests): the word-at-a-time test shared by the
 * encoder and the decoder, and the decoder's fast path. */
#ifndef CAE_JSONRPC_INTERNAL_H
#define CAE_JSONRPC_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The bytes of w (8 bytes as loaded from memory) that JSON text cannot carry as they are in a
 * string: the top bit of each byte below 0x20, '"', '\\' or from 0x80 (the "has a byte less
 * than" and "has a zero byte" word tricks). 0 when all 8 are plain ASCII. Bits above the
 * lowest one may be spurious; the lowest one is exact. */
static inline uint64_t cae_jsonrpc_special8(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t quote = w ^ (ones * '"'), backslash = w ^ (ones * '\\');
	uint64_t special = ((w - ones * 0x20) & ~w) | ((quote - ones) & ~quote) |
			   ((backslash - ones) & ~backslash) | w;
	return special & high;
}

/* Offset of the byte of the lowest bit set in a non-zero special8 mask, or 0 where the byte
 * order does not allow it (the caller then goes on byte by byte). */
static inline size_t cae_jsonrpc_special8_offset(uint64_t sp)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (size_t)__builtin_ctzll(sp) / 8;
#else
	(void)sp;
	return 0;
#endif
}

/* Parses text[0, len) when it is an object or an array that json_loadb(JSON_DECODE_ANY |
 * JSON_REJECT_DUPLICATES) would accept, into the value json_loadb would build (the same
 * members in the same order, the same types), nested at most max_depth deep. NULL for
 * anything else: other input, errors, and what the fast path leaves to jansson (reals,
 * integers of 19 digits or more, a \u0000 escape), so that json_loadb then decides and
 * explains. New reference. */
json_t *cae_jsonrpc_parse_fast(const char *text, size_t len, unsigned max_depth);

#endif
