/* varq's version: the one the headers were written for (the VQ_VERSION_*
 * macros, fixed when a program is compiled) and the one of the library it
 * runs with (vq_version(), read at run time).
 *
 * Versions are MAJOR.MINOR.PATCH. A patch release only fixes; a minor
 * release adds to the API; while MAJOR is 0, a minor release may also
 * change or remove what an earlier one had (the release notes say what).
 *
 * ABI and soname. The shared library's soname is libvarq.so.0 (meson.build's
 * soversion), and it changes (libvarq.so.1, then .2, ...) with every release
 * that breaks the ABI, 0.x releases included: one that removes a function,
 * changes a function's parameters or return type, a struct's layout or an
 * enum's or macro's value, so that a program built against the older headers
 * would misbehave with the newer library. Releases that keep the ABI (only
 * adding functions, types and constants) keep the soname, so a program
 * built against an older release of the same soname runs with a newer one;
 * vq_version() tells it which one it got.
 *
 * The macros are meson.build's project version, written out: the build
 * checks that the two agree (meson setup fails otherwise). */
#ifndef VARQ_VERSION_H
#define VARQ_VERSION_H

#include <varq/error.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VQ_VERSION_MAJOR 0        /* the version's first number */
#define VQ_VERSION_MINOR 2        /* the version's second number */
#define VQ_VERSION_PATCH 0        /* the version's third number */
#define VQ_VERSION_STRING "0.2.0" /* MAJOR.MINOR.PATCH, as a string */

/* The version of the varq library this program runs with, as
 * "MAJOR.MINOR.PATCH": a static string. It is the library's own, decided
 * when the library was built, so a program linked against the shared
 * library compares it with VQ_VERSION_STRING (the headers it was compiled
 * with) to see whether it got a newer library than it was built for.
 * Thread-safe; may be called before any other varq function. */
VQ_API const char *vq_version(void);

#ifdef __cplusplus
}
#endif
#endif
