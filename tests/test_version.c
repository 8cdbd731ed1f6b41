/* The version: the library's (vq_version) is the headers' (VQ_VERSION_*),
 * and the string is the three numbers. */
#include <varq/varq.h>

#include <criterion/criterion.h>
#include <stdio.h>

Test(version, library_matches_the_headers)
{
    cr_assert_str_eq(vq_version(), VQ_VERSION_STRING);
}

Test(version, string_is_the_three_numbers)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", VQ_VERSION_MAJOR, VQ_VERSION_MINOR, VQ_VERSION_PATCH);
    cr_assert_str_eq(VQ_VERSION_STRING, want);
}
