/* (being written) */
#include "../internal.h"

const vq__op_def vq__ops_loss[] = {
    {0},
};
