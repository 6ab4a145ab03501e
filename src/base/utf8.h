/* UTF-8 helpers: results are JSON, so every byte string from a command or a file is made
 * valid UTF-8 before it leaves the library. */
#ifndef CAE_BASE_UTF8_H
#define CAE_BASE_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* Length of the next valid UTF-8 sequence at s (1..4), or 0 if s[0..n) does not start
 * with one (invalid byte, overlong, surrogate, or cut short). */
size_t cae__utf8_seq_len(const unsigned char *s, size_t n);
bool cae__utf8_is_valid(const char *s, size_t n);
/* Returns a new NUL-terminated copy in which every invalid sequence is replaced by
 * U+FFFD. *out_len receives the length. NULL on allocation failure. */
char *cae__utf8_sanitize(const char *s, size_t n, size_t *out_len);
/* For valid UTF-8: the byte length of at most max_chars characters from s (never splitting
 * a character). *chars (may be NULL) receives the count of characters in that prefix. */
size_t cae__utf8_prefix_chars(const char *s, size_t n, size_t max_chars, size_t *chars);
/* For valid UTF-8: the byte offset of the start of the last max_chars characters. */
size_t cae__utf8_suffix_chars(const char *s, size_t n, size_t max_chars);
/* Number of characters in valid UTF-8. */
size_t cae__utf8_count(const char *s, size_t n);
/* The largest length <= n that does not end in the middle of a multi-byte sequence
 * (for byte caps on possibly invalid data: only a trailing partial sequence is dropped). */
size_t cae__utf8_floor(const char *s, size_t n);
/* The value of a hexadecimal digit (0-9, a-f, A-F), or -1. */
int cae__hex_digit(int c);
/* The smallest offset >= off that is not a continuation byte. */
size_t cae__utf8_ceil(const char *s, size_t n, size_t off);

#endif
