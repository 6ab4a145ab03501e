/* The mark of libcae's public API. libcae is built with hidden symbol visibility: a function
 * or variable is exported only when its declaration in a public header (include/cae/) carries
 * CAE_EXPORT. Everything else, including functions shared between the library's modules
 * (src/<module>/<module>-internal.h, src/base/), stays inside the library. scripts/lint.sh
 * checks that the shared library exports nothing that include/cae/ does not declare.
 */
#ifndef CAE_EXPORT_H
#define CAE_EXPORT_H

#define CAE_EXPORT __attribute__((visibility("default")))

#endif
