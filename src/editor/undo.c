/* The editor's undo history: per file, the contents before each edit (newest last), at most
 * `depth` per file and `budget` bytes over all files; when over budget the oldest entries of
 * any file go first. Every entry is charged its data plus a fixed overhead and its key, so
 * that many empty entries (files created from nothing) are bounded too. */
#include "editor-internal.h"

#include "base/macro.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/banned.h"

#define ENTRY_OVERHEAD 64
/* Files with a history at the same time; the oldest entries go first beyond this. */
#define MAX_HISTORIES 4096

typedef struct entry {
	char *data;
	size_t len;
	size_t cost;
	uint64_t seq;
	uint64_t written;
	bool existed;
} entry;

typedef struct history {
	char *key;
	entry *e; /* e[0] oldest; capacity depth */
	size_t n;
} history;

struct ed_undo {
	history *h;
	size_t nh, caph;
	size_t bytes;
	size_t budget;
	unsigned depth;
	uint64_t seq;
	void (*release)(void *ctx, char *data);
	void *release_ctx;
};

ed_undo *cae__ed_undo_new(unsigned depth, size_t budget)
{
	ed_undo *u = calloc(1, sizeof(*u));
	if (!u)
		return NULL;
	u->depth = depth;
	u->budget = budget;
	return u;
}

void cae__ed_undo_set_release(ed_undo *u, void (*release)(void *ctx, char *data), void *ctx)
{
	u->release = release;
	u->release_ctx = ctx;
}

/* Lets go of the data of an entry dropped (or not kept). */
static void let_go(ed_undo *u, char *data)
{
	if (u->release && data)
		u->release(u->release_ctx, data);
	else
		free(data);
}

static void history_free(history *h)
{
	for (size_t i = 0; i < h->n; i++)
		free(h->e[i].data);
	free(h->e);
	free(h->key);
}

void cae__ed_undo_free(ed_undo *u)
{
	if (!u)
		return;
	for (size_t i = 0; i < u->nh; i++)
		history_free(&u->h[i]);
	free(u->h);
	free(u);
}

size_t cae__ed_undo_bytes(const ed_undo *u)
{
	return u->bytes;
}

static history *find(ed_undo *u, const char *key)
{
	for (size_t i = 0; i < u->nh; i++)
		if (strcmp(u->h[i].key, key) == 0)
			return &u->h[i];
	return NULL;
}

/* Drops the oldest entry of h. */
static void drop_oldest(ed_undo *u, history *h)
{
	u->bytes -= h->e[0].cost;
	let_go(u, h->e[0].data);
	memmove(h->e, h->e + 1, (h->n - 1) * sizeof(entry));
	h->n--;
}

/* Removes empty histories (keeps the array compact). */
static void compact(ed_undo *u)
{
	size_t o = 0;
	for (size_t i = 0; i < u->nh; i++) {
		if (u->h[i].n == 0) {
			history_free(&u->h[i]);
			continue;
		}
		u->h[o++] = u->h[i];
	}
	u->nh = o;
}

/* Evicts the globally oldest entry. Returns false when there is nothing to evict. */
static bool evict_one(ed_undo *u)
{
	history *oldest = NULL;
	for (size_t i = 0; i < u->nh; i++)
		if (u->h[i].n > 0 && (!oldest || u->h[i].e[0].seq < oldest->e[0].seq))
			oldest = &u->h[i];
	if (!oldest)
		return false;
	drop_oldest(u, oldest);
	return true;
}

int cae__ed_undo_push(ed_undo *u, const char *key, char *data, size_t len, bool existed,
		      uint64_t written)
{
	size_t cost = len + ENTRY_OVERHEAD + strlen(key);
	if (u->depth == 0 || cost > u->budget || cost < len) {
		let_go(u, data);
		return 0;
	}
	history *h = find(u, key);
	if (!h) {
		while (u->nh >= MAX_HISTORIES && evict_one(u))
			compact(u);
		if (u->nh == u->caph) {
			size_t nc = u->caph ? u->caph * 2 : 8;
			history *nh = realloc(u->h, nc * sizeof(history));
			if (!nh) {
				free(data);
				return -ENOMEM;
			}
			u->h = nh;
			u->caph = nc;
		}
		h = &u->h[u->nh];
		memset(h, 0, sizeof(*h));
		h->key = strdup(key);
		h->e = calloc(u->depth, sizeof(entry));
		if (!h->key || !h->e) {
			free(h->key);
			free(h->e);
			free(data);
			return -ENOMEM;
		}
		u->nh++;
	}
	if (h->n == u->depth)
		drop_oldest(u, h);
	while (u->bytes + cost > u->budget && evict_one(u))
		;
	h->e[h->n++] = (entry){
	    .data = data,
	    .len = len,
	    .cost = cost,
	    .seq = ++u->seq,
	    .existed = existed,
	    .written = written,
	};
	u->bytes += cost;
	/* h stays valid until here; compaction may move histories. */
	compact(u);
	return 1;
}

int cae__ed_undo_pop(ed_undo *u, const char *key, char **data, size_t *len, bool *existed,
		     uint64_t *written)
{
	history *h = find(u, key);
	if (!h || h->n == 0)
		return 0;
	entry *e = &h->e[--h->n];
	*data = e->data;
	*len = e->len;
	*existed = e->existed;
	*written = e->written;
	u->bytes -= e->cost;
	compact(u);
	return 1;
}

/* ---- ed_hash: 8-byte words, multiply and xor-shift (FNV-style constants) ---- */

#define HASH_MUL 0x100000001b3ULL
#define HASH_K 0x9e3779b97f4a7c15ULL

static uint64_t mix(uint64_t h, uint64_t w)
{
	h ^= w * HASH_K;
	h *= HASH_MUL;
	return h ^ (h >> 29);
}

void cae__ed_hash_init(ed_hash *hs)
{
	memset(hs, 0, sizeof(*hs));
	hs->h = 0xcbf29ce484222325ULL;
}

void cae__ed_hash_feed(ed_hash *hs, const void *data, size_t n)
{
	const unsigned char *p = data;
	hs->total += n;
	while (n && hs->nbuf) {
		hs->buf[hs->nbuf++] = *p++;
		n--;
		if (hs->nbuf == 8) {
			uint64_t w;
			memcpy(&w, hs->buf, 8);
			hs->h = mix(hs->h, w);
			hs->nbuf = 0;
		}
	}
	if (hs->nbuf)
		return; /* all of it went into the partial word */
	uint64_t h = hs->h;
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h = mix(h, w);
	}
	hs->h = h;
	memcpy(hs->buf, p, n);
	hs->nbuf = n;
}

uint64_t cae__ed_hash_final(const ed_hash *hs)
{
	uint64_t w = 0;
	memcpy(&w, hs->buf, hs->nbuf);
	return mix(mix(hs->h, w), hs->total);
}
