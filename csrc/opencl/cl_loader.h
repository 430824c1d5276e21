/* Run-time loading of the OpenCL ICD loader (libOpenCL.so.1).
 *
 * The extension does not link against libOpenCL: `import pyfastpim` and the CPU
 * kernels work on a machine without it. This header replaces <CL/cl.h> in
 * csrc/opencl/: it declares the OpenCL 1.2 API (types and prototypes from the
 * headers) and redirects every cl* name to a function pointer filled by
 * dlopen/dlsym on first use. Every OpenCL path starts at clGetPlatformIDs, so
 * that one call goes through a wrapper that loads the library; when the library
 * (or one of its symbols) is missing it reports "no platform"
 * (CL_PLATFORM_NOT_FOUND_KHR) and pf_cl_loader_error() says why, naming the
 * library and the Debian package. No other cl* call can happen before a
 * platform id exists, so the other pointers are always set when used.
 *
 * PYFASTPIM_OPENCL_LIBRARY overrides the file name passed to dlopen (tests use
 * it to simulate a machine without OpenCL). */
#ifndef PF_CL_LOADER_H
#define PF_CL_LOADER_H

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#define PF_CL_LIBRARY "libOpenCL.so.1"
#define PF_CL_DEBIAN_PACKAGE "ocl-icd-libopencl1"

/* The OpenCL 1.2 entry points (all exported by every ICD loader). */
#define PF_CL_FUNCTIONS(X) \
    X(clGetPlatformIDs) \
    X(clGetPlatformInfo) \
    X(clGetDeviceIDs) \
    X(clGetDeviceInfo) \
    X(clCreateSubDevices) \
    X(clRetainDevice) \
    X(clReleaseDevice) \
    X(clCreateContext) \
    X(clCreateContextFromType) \
    X(clRetainContext) \
    X(clReleaseContext) \
    X(clGetContextInfo) \
    X(clRetainCommandQueue) \
    X(clReleaseCommandQueue) \
    X(clGetCommandQueueInfo) \
    X(clCreateBuffer) \
    X(clCreateSubBuffer) \
    X(clCreateImage) \
    X(clRetainMemObject) \
    X(clReleaseMemObject) \
    X(clGetSupportedImageFormats) \
    X(clGetMemObjectInfo) \
    X(clGetImageInfo) \
    X(clSetMemObjectDestructorCallback) \
    X(clRetainSampler) \
    X(clReleaseSampler) \
    X(clGetSamplerInfo) \
    X(clCreateProgramWithSource) \
    X(clCreateProgramWithBinary) \
    X(clCreateProgramWithBuiltInKernels) \
    X(clRetainProgram) \
    X(clReleaseProgram) \
    X(clBuildProgram) \
    X(clCompileProgram) \
    X(clLinkProgram) \
    X(clUnloadPlatformCompiler) \
    X(clGetProgramInfo) \
    X(clGetProgramBuildInfo) \
    X(clCreateKernel) \
    X(clCreateKernelsInProgram) \
    X(clRetainKernel) \
    X(clReleaseKernel) \
    X(clSetKernelArg) \
    X(clGetKernelInfo) \
    X(clGetKernelArgInfo) \
    X(clGetKernelWorkGroupInfo) \
    X(clWaitForEvents) \
    X(clGetEventInfo) \
    X(clCreateUserEvent) \
    X(clRetainEvent) \
    X(clReleaseEvent) \
    X(clSetUserEventStatus) \
    X(clSetEventCallback) \
    X(clGetEventProfilingInfo) \
    X(clFlush) \
    X(clFinish) \
    X(clEnqueueReadBuffer) \
    X(clEnqueueReadBufferRect) \
    X(clEnqueueWriteBuffer) \
    X(clEnqueueWriteBufferRect) \
    X(clEnqueueFillBuffer) \
    X(clEnqueueCopyBuffer) \
    X(clEnqueueCopyBufferRect) \
    X(clEnqueueReadImage) \
    X(clEnqueueWriteImage) \
    X(clEnqueueFillImage) \
    X(clEnqueueCopyImage) \
    X(clEnqueueCopyImageToBuffer) \
    X(clEnqueueCopyBufferToImage) \
    X(clEnqueueMapBuffer) \
    X(clEnqueueMapImage) \
    X(clEnqueueUnmapMemObject) \
    X(clEnqueueMigrateMemObjects) \
    X(clEnqueueNDRangeKernel) \
    X(clEnqueueNativeKernel) \
    X(clEnqueueMarkerWithWaitList) \
    X(clEnqueueBarrierWithWaitList) \
    X(clGetExtensionFunctionAddressForPlatform) \
    X(clCreateCommandQueue) \
    X(clCreateSampler) \
    X(clEnqueueTask)

typedef struct {
#define PF_CL_MEMBER(name) __typeof__(&name) name;
    PF_CL_FUNCTIONS(PF_CL_MEMBER)
#undef PF_CL_MEMBER
} pf_cl_api_table;

extern pf_cl_api_table pf_cl_api;

/* Loads the library once (thread-safe); 0 on success, -1 when it is missing. */
int pf_cl_load(void);
/* NULL when the library is loaded (or not yet tried), else why it could not be. */
const char *pf_cl_loader_error(void);
/* clGetPlatformIDs that first loads the library; CL_PLATFORM_NOT_FOUND_KHR when it cannot. */
cl_int pf_cl_get_platform_ids_lazy(cl_uint num_entries, cl_platform_id *platforms, cl_uint *num_platforms);

#ifndef PF_CL_LOADER_IMPL
/* every cl* name goes through pf_cl_api */
#define clGetPlatformIDs pf_cl_get_platform_ids_lazy
#define clGetPlatformInfo (pf_cl_api.clGetPlatformInfo)
#define clGetDeviceIDs (pf_cl_api.clGetDeviceIDs)
#define clGetDeviceInfo (pf_cl_api.clGetDeviceInfo)
#define clCreateSubDevices (pf_cl_api.clCreateSubDevices)
#define clRetainDevice (pf_cl_api.clRetainDevice)
#define clReleaseDevice (pf_cl_api.clReleaseDevice)
#define clCreateContext (pf_cl_api.clCreateContext)
#define clCreateContextFromType (pf_cl_api.clCreateContextFromType)
#define clRetainContext (pf_cl_api.clRetainContext)
#define clReleaseContext (pf_cl_api.clReleaseContext)
#define clGetContextInfo (pf_cl_api.clGetContextInfo)
#define clRetainCommandQueue (pf_cl_api.clRetainCommandQueue)
#define clReleaseCommandQueue (pf_cl_api.clReleaseCommandQueue)
#define clGetCommandQueueInfo (pf_cl_api.clGetCommandQueueInfo)
#define clCreateBuffer (pf_cl_api.clCreateBuffer)
#define clCreateSubBuffer (pf_cl_api.clCreateSubBuffer)
#define clCreateImage (pf_cl_api.clCreateImage)
#define clRetainMemObject (pf_cl_api.clRetainMemObject)
#define clReleaseMemObject (pf_cl_api.clReleaseMemObject)
#define clGetSupportedImageFormats (pf_cl_api.clGetSupportedImageFormats)
#define clGetMemObjectInfo (pf_cl_api.clGetMemObjectInfo)
#define clGetImageInfo (pf_cl_api.clGetImageInfo)
#define clSetMemObjectDestructorCallback (pf_cl_api.clSetMemObjectDestructorCallback)
#define clRetainSampler (pf_cl_api.clRetainSampler)
#define clReleaseSampler (pf_cl_api.clReleaseSampler)
#define clGetSamplerInfo (pf_cl_api.clGetSamplerInfo)
#define clCreateProgramWithSource (pf_cl_api.clCreateProgramWithSource)
#define clCreateProgramWithBinary (pf_cl_api.clCreateProgramWithBinary)
#define clCreateProgramWithBuiltInKernels (pf_cl_api.clCreateProgramWithBuiltInKernels)
#define clRetainProgram (pf_cl_api.clRetainProgram)
#define clReleaseProgram (pf_cl_api.clReleaseProgram)
#define clBuildProgram (pf_cl_api.clBuildProgram)
#define clCompileProgram (pf_cl_api.clCompileProgram)
#define clLinkProgram (pf_cl_api.clLinkProgram)
#define clUnloadPlatformCompiler (pf_cl_api.clUnloadPlatformCompiler)
#define clGetProgramInfo (pf_cl_api.clGetProgramInfo)
#define clGetProgramBuildInfo (pf_cl_api.clGetProgramBuildInfo)
#define clCreateKernel (pf_cl_api.clCreateKernel)
#define clCreateKernelsInProgram (pf_cl_api.clCreateKernelsInProgram)
#define clRetainKernel (pf_cl_api.clRetainKernel)
#define clReleaseKernel (pf_cl_api.clReleaseKernel)
#define clSetKernelArg (pf_cl_api.clSetKernelArg)
#define clGetKernelInfo (pf_cl_api.clGetKernelInfo)
#define clGetKernelArgInfo (pf_cl_api.clGetKernelArgInfo)
#define clGetKernelWorkGroupInfo (pf_cl_api.clGetKernelWorkGroupInfo)
#define clWaitForEvents (pf_cl_api.clWaitForEvents)
#define clGetEventInfo (pf_cl_api.clGetEventInfo)
#define clCreateUserEvent (pf_cl_api.clCreateUserEvent)
#define clRetainEvent (pf_cl_api.clRetainEvent)
#define clReleaseEvent (pf_cl_api.clReleaseEvent)
#define clSetUserEventStatus (pf_cl_api.clSetUserEventStatus)
#define clSetEventCallback (pf_cl_api.clSetEventCallback)
#define clGetEventProfilingInfo (pf_cl_api.clGetEventProfilingInfo)
#define clFlush (pf_cl_api.clFlush)
#define clFinish (pf_cl_api.clFinish)
#define clEnqueueReadBuffer (pf_cl_api.clEnqueueReadBuffer)
#define clEnqueueReadBufferRect (pf_cl_api.clEnqueueReadBufferRect)
#define clEnqueueWriteBuffer (pf_cl_api.clEnqueueWriteBuffer)
#define clEnqueueWriteBufferRect (pf_cl_api.clEnqueueWriteBufferRect)
#define clEnqueueFillBuffer (pf_cl_api.clEnqueueFillBuffer)
#define clEnqueueCopyBuffer (pf_cl_api.clEnqueueCopyBuffer)
#define clEnqueueCopyBufferRect (pf_cl_api.clEnqueueCopyBufferRect)
#define clEnqueueReadImage (pf_cl_api.clEnqueueReadImage)
#define clEnqueueWriteImage (pf_cl_api.clEnqueueWriteImage)
#define clEnqueueFillImage (pf_cl_api.clEnqueueFillImage)
#define clEnqueueCopyImage (pf_cl_api.clEnqueueCopyImage)
#define clEnqueueCopyImageToBuffer (pf_cl_api.clEnqueueCopyImageToBuffer)
#define clEnqueueCopyBufferToImage (pf_cl_api.clEnqueueCopyBufferToImage)
#define clEnqueueMapBuffer (pf_cl_api.clEnqueueMapBuffer)
#define clEnqueueMapImage (pf_cl_api.clEnqueueMapImage)
#define clEnqueueUnmapMemObject (pf_cl_api.clEnqueueUnmapMemObject)
#define clEnqueueMigrateMemObjects (pf_cl_api.clEnqueueMigrateMemObjects)
#define clEnqueueNDRangeKernel (pf_cl_api.clEnqueueNDRangeKernel)
#define clEnqueueNativeKernel (pf_cl_api.clEnqueueNativeKernel)
#define clEnqueueMarkerWithWaitList (pf_cl_api.clEnqueueMarkerWithWaitList)
#define clEnqueueBarrierWithWaitList (pf_cl_api.clEnqueueBarrierWithWaitList)
#define clGetExtensionFunctionAddressForPlatform (pf_cl_api.clGetExtensionFunctionAddressForPlatform)
#define clCreateCommandQueue (pf_cl_api.clCreateCommandQueue)
#define clCreateSampler (pf_cl_api.clCreateSampler)
#define clEnqueueTask (pf_cl_api.clEnqueueTask)
#endif

#endif
