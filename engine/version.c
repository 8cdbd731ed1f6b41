/* vq_version: the library's version, which meson.build passes in as
 * VARQ_VERSION (its project version), so that the answer is the library's
 * own and not that of the headers a caller was compiled with. */
#include <varq/version.h>

#ifndef VARQ_VERSION
#error "VARQ_VERSION is meson.build's project version, passed with -D"
#endif

VQ_API const char *vq_version(void)
{
    return VARQ_VERSION;
}
