/*
 * Stand-in for the CUDA runtime's builtin_types.h, found first on the include path of the native
 * CUPTI decoder. cupti_callbacks.h (pulled in by cupti_activity.h) includes it, but nothing the
 * decoder compiles uses a runtime type, and the real header needs crt/host_defines.h from yet
 * another wheel (nvidia-cuda-crt). The driver types CUPTI does use come from cuda.h
 * (nvidia-cuda-runtime wheel).
 */
#ifndef AITUNE_DISPATCH_BUILTIN_TYPES_STAND_IN_H
#define AITUNE_DISPATCH_BUILTIN_TYPES_STAND_IN_H
#endif
