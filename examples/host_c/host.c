/* pycoop_host: runs a kernel exported by pycoop (KERNEL.spv + KERNEL.spv.json) with plain
 * Vulkan, binding its arguments for either ABI the sidecar describes:
 *   "device_address": buffers as 64-bit device addresses in the push-constant block (or in an
 *                     argument buffer whose address is the only push constant);
 *   "descriptors":    buffers as storage-buffer descriptors of set 0, scalars as push constants.
 *
 * usage: pycoop_host KERNEL.spv GX GY GZ [-s NAME=VALUE]... ARG...
 *   one ARG per kernel parameter, in order:
 *     scalar:  a number (3, -1, 2.5)
 *     buffer:  IN.bin           initial contents
 *              IN.bin=WANT.bin  initial contents; after the dispatch the buffer must equal
 *                               WANT.bin (floats within 1e-3 relative, integers exactly)
 *   -s NAME=VALUE sets a specialization constant (pycoop.Spec parameter) at pipeline creation.
 * Prints "ok" and exits 0 when every checked buffer matches.
 * Build: cc -std=c99 -Wall -O2 -o pycoop_host host.c -lvulkan -lm */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

#include "json.h"

#ifndef VK_KHR_cooperative_matrix
/* Headers older than 1.3.255 (Debian 12 ships 1.3.239) lack VK_KHR_cooperative_matrix; the
 * feature structure is all this host needs of it (values from the Vulkan registry). */
#define VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR ((VkStructureType)1000506000)
typedef struct VkPhysicalDeviceCooperativeMatrixFeaturesKHR {
    VkStructureType sType;
    void *pNext;
    VkBool32 cooperativeMatrix;
    VkBool32 cooperativeMatrixRobustBufferAccess;
} VkPhysicalDeviceCooperativeMatrixFeaturesKHR;
#endif

#define MAX_ARGS 64

static void die(const char *what) {
    fprintf(stderr, "pycoop_host: %s\n", what);
    exit(2);
}

static void check(VkResult r, const char *what) {
    if (r != VK_SUCCESS) {
        fprintf(stderr, "pycoop_host: %s failed (VkResult %d)\n", what, (int)r);
        exit(2);
    }
}

static char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "pycoop_host: cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *data = malloc((size_t)n + 1);
    if (fread(data, 1, (size_t)n, f) != (size_t)n) die("short read");
    data[n] = '\0';
    fclose(f);
    *size = (size_t)n;
    return data;
}

/* A number stored as the sidecar's dtype ("uint32", "float32", ...) at `dst`; returns its size. */
static size_t pack(const char *dtype, double v, void *dst) {
    if (!strcmp(dtype, "float32")) { float x = (float)v; memcpy(dst, &x, 4); return 4; }
    if (!strcmp(dtype, "float64")) { memcpy(dst, &v, 8); return 8; }
    if (!strcmp(dtype, "bool") || !strcmp(dtype, "uint32")) { uint32_t x = (uint32_t)v; memcpy(dst, &x, 4); return 4; }
    if (!strcmp(dtype, "int32")) { int32_t x = (int32_t)v; memcpy(dst, &x, 4); return 4; }
    if (!strcmp(dtype, "uint64")) { uint64_t x = (uint64_t)v; memcpy(dst, &x, 8); return 8; }
    if (!strcmp(dtype, "int64")) { int64_t x = (int64_t)v; memcpy(dst, &x, 8); return 8; }
    if (!strcmp(dtype, "uint16")) { uint16_t x = (uint16_t)v; memcpy(dst, &x, 2); return 2; }
    if (!strcmp(dtype, "int16")) { int16_t x = (int16_t)v; memcpy(dst, &x, 2); return 2; }
    if (!strcmp(dtype, "uint8")) { uint8_t x = (uint8_t)v; memcpy(dst, &x, 1); return 1; }
    if (!strcmp(dtype, "int8")) { int8_t x = (int8_t)v; memcpy(dst, &x, 1); return 1; }
    fprintf(stderr, "pycoop_host: scalars of dtype %s are not supported\n", dtype);
    exit(2);
}

static double half_to_double(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

/* Number of mismatching elements of `got` against `want` (compared as `dtype`). */
static size_t compare(const char *name, const char *dtype, const void *got, const void *want, size_t bytes) {
    size_t bad = 0, n;
    int is_float = !strncmp(dtype, "float", 5);
    size_t width = !strcmp(dtype, "float64") ? 8 : !strcmp(dtype, "float16") ? 2 : 4;
    if (!is_float) return memcmp(got, want, bytes) != 0;
    n = bytes / width;
    for (size_t i = 0; i < n; i++) {
        double g, w;
        if (width == 8) { memcpy(&g, (const char *)got + 8 * i, 8); memcpy(&w, (const char *)want + 8 * i, 8); }
        else if (width == 2) {
            uint16_t a, b;
            memcpy(&a, (const char *)got + 2 * i, 2); memcpy(&b, (const char *)want + 2 * i, 2);
            g = half_to_double(a); w = half_to_double(b);
        } else {
            float a, b;
            memcpy(&a, (const char *)got + 4 * i, 4); memcpy(&b, (const char *)want + 4 * i, 4);
            g = a; w = b;
        }
        if (!(fabs(g - w) <= 1e-3 * (1.0 + fabs(w)))) {
            if (bad < 5) fprintf(stderr, "%s[%zu] = %g, expected %g\n", name, i, g, w);
            bad++;
        }
    }
    return bad;
}

typedef struct {
    VkBuffer buffer;
    VkDeviceMemory memory;
    void *mapped;
    size_t size;
} host_buffer;

static VkPhysicalDeviceMemoryProperties mem_props;

static host_buffer make_buffer(VkDevice dev, size_t size, int device_address) {
    host_buffer b = {0};
    b.size = size;
    VkBufferCreateInfo info = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
    info.size = size < 16 ? 16 : size;
    info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
               | (device_address ? VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT : 0);
    check(vkCreateBuffer(dev, &info, NULL, &b.buffer), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(dev, b.buffer, &req);
    VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    uint32_t type = UINT32_MAX;
    for (uint32_t i = 0; i < mem_props.memoryTypeCount && type == UINT32_MAX; i++)
        if ((req.memoryTypeBits & (1u << i)) && (mem_props.memoryTypes[i].propertyFlags & want) == want)
            type = i;
    if (type == UINT32_MAX) die("no host-visible coherent memory type");
    VkMemoryAllocateFlagsInfo flags = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO};
    flags.flags = VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT;
    VkMemoryAllocateInfo alloc = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
    alloc.pNext = device_address ? &flags : NULL;
    alloc.allocationSize = req.size;
    alloc.memoryTypeIndex = type;
    check(vkAllocateMemory(dev, &alloc, NULL, &b.memory), "vkAllocateMemory");
    check(vkBindBufferMemory(dev, b.buffer, b.memory, 0), "vkBindBufferMemory");
    check(vkMapMemory(dev, b.memory, 0, VK_WHOLE_SIZE, 0, &b.mapped), "vkMapMemory");
    memset(b.mapped, 0, info.size);
    return b;
}

static uint64_t address_of(VkDevice dev, VkBuffer buffer) {
    VkBufferDeviceAddressInfo info = {VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO};
    info.buffer = buffer;
    return vkGetBufferDeviceAddress(dev, &info);
}

int main(int argc, char **argv) {
    if (argc < 5) die("usage: pycoop_host KERNEL.spv GX GY GZ [-s NAME=VALUE]... ARG...");
    uint32_t grid[3] = {(uint32_t)atoi(argv[2]), (uint32_t)atoi(argv[3]), (uint32_t)atoi(argv[4])};

    /* ---- the module and its sidecar */
    size_t spv_size, json_size;
    char *spv = read_file(argv[1], &spv_size);
    char json_path[4096];
    snprintf(json_path, sizeof json_path, "%s.json", argv[1]);
    char *text = read_file(json_path, &json_size);
    json meta = {0};
    if (!json_parse_value(text, &meta)) die("cannot parse the sidecar JSON");
    const json *abi = json_get(&meta, "abi");
    const json *params = json_get(abi, "args");
    const json *specs = json_get(abi, "spec_constants");
    const char *abi_kind = json_str(json_get(abi, "abi"), "device_address");
    int descriptors = !strcmp(abi_kind, "descriptors");
    int arg_buffer = !strcmp(json_str(json_get(abi, "mode"), ""), "arg_buffer");
    size_t block_size = (size_t)json_num(json_get(abi, "size"), 0);
    if (!params || params->count > MAX_ARGS) die("the sidecar has no usable abi.args");

    /* ---- specialization constants: defaults from the sidecar, overridden by -s */
    size_t nspec = specs ? specs->count : 0;
    VkSpecializationMapEntry spec_entries[MAX_ARGS];
    unsigned char spec_data[MAX_ARGS * 8];
    size_t spec_size = 0;
    int argi = 5;
    for (size_t i = 0; i < nspec && i < MAX_ARGS; i++) {
        const json *s = &specs->items[i];
        const char *name = json_str(json_get(s, "name"), "");
        double value = json_num(json_get(s, "default"), 0);
        for (int a = 5; a + 1 < argc; a++) {
            size_t len = strlen(name);
            if (!strcmp(argv[a], "-s") && !strncmp(argv[a + 1], name, len) && argv[a + 1][len] == '=')
                value = atof(argv[a + 1] + len + 1);
        }
        spec_entries[i].constantID = (uint32_t)json_num(json_get(s, "id"), 0);
        spec_entries[i].offset = (uint32_t)spec_size;
        spec_entries[i].size = pack(json_str(json_get(s, "dtype"), ""), value, spec_data + spec_size);
        spec_size += spec_entries[i].size;
    }
    while (argi + 1 < argc && !strcmp(argv[argi], "-s")) argi += 2;
    if ((size_t)(argc - argi) != params->count) die("one argument per kernel parameter, in order");

    /* ---- instance, device (every supported core feature enabled), queue */
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "pycoop_host";
    app.apiVersion = VK_API_VERSION_1_3;
    VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ici.pApplicationInfo = &app;
    VkInstance instance;
    check(vkCreateInstance(&ici, NULL, &instance), "vkCreateInstance");
    uint32_t ndev = 8;
    VkPhysicalDevice devices[8], phys;
    VkResult r = vkEnumeratePhysicalDevices(instance, &ndev, devices);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || ndev == 0) die("no Vulkan device");
    phys = devices[0];          /* the first GPU, else the first device (e.g. lavapipe) */
    for (uint32_t i = ndev; i-- > 0;) {
        VkPhysicalDeviceProperties props;
        vkGetPhysicalDeviceProperties(devices[i], &props);
        if (props.deviceType != VK_PHYSICAL_DEVICE_TYPE_CPU) phys = devices[i];
    }
    vkGetPhysicalDeviceMemoryProperties(phys, &mem_props);

    /* the Vulkan device extensions the module needs, as the sidecar lists them */
    const json *exts = json_get(json_get(&meta, "requirements"), "extensions");
    const char *ext_names[MAX_ARGS];
    uint32_t next = 0;
    int coopmat = 0;
    for (size_t i = 0; exts && i < exts->count && next < MAX_ARGS; i++) {
        ext_names[next++] = exts->items[i].string;
        coopmat |= !strcmp(exts->items[i].string, "VK_KHR_cooperative_matrix");
    }

    VkPhysicalDeviceVulkan13Features f13 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES};
    VkPhysicalDeviceVulkan12Features f12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceVulkan11Features f11 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
    VkPhysicalDeviceFeatures2 features = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    features.pNext = &f11;
    f11.pNext = &f12;
    f12.pNext = &f13;
    VkPhysicalDeviceCooperativeMatrixFeaturesKHR fcm = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR};
    if (coopmat) f13.pNext = &fcm;
    vkGetPhysicalDeviceFeatures2(phys, &features);

    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
    qci.queueFamilyIndex = 0;      /* family 0 supports compute on the drivers this targets */
    qci.queueCount = 1;
    qci.pQueuePriorities = &priority;
    VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
    dci.pNext = &features;
    dci.queueCreateInfoCount = 1;
    dci.pQueueCreateInfos = &qci;
    dci.enabledExtensionCount = next;
    dci.ppEnabledExtensionNames = ext_names;
    VkDevice dev;
    check(vkCreateDevice(phys, &dci, NULL, &dev), "vkCreateDevice");
    VkQueue queue;
    vkGetDeviceQueue(dev, 0, 0, &queue);

    /* ---- arguments: buffers from files, scalars into the push-constant block */
    host_buffer buffers[MAX_ARGS] = {{0}};
    const char *want_files[MAX_ARGS] = {0};
    unsigned char block[256] = {0};
    if (block_size > sizeof block) die("argument block too large");
    VkDescriptorSetLayoutBinding bindings[MAX_ARGS];
    uint32_t nbind = 0;
    for (size_t i = 0; i < params->count; i++) {
        const json *p = &params->items[i];
        const char *arg = argv[argi + i];
        if (strcmp(json_str(json_get(p, "kind"), ""), "buffer")) {
            pack(json_str(json_get(p, "dtype"), ""), atof(arg), block + (size_t)json_num(json_get(p, "offset"), 0));
            continue;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s", arg);
        char *eq = strchr(path, '=');
        if (eq) { *eq = '\0'; want_files[i] = arg + (eq - path) + 1; }
        size_t size;
        char *data = read_file(path, &size);
        buffers[i] = make_buffer(dev, size, !descriptors);
        memcpy(buffers[i].mapped, data, size);
        free(data);
        if (descriptors) {
            VkDescriptorSetLayoutBinding b = {0};
            b.binding = (uint32_t)json_num(json_get(p, "binding"), 0);
            b.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            b.descriptorCount = 1;
            b.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
            bindings[nbind++] = b;
        } else {
            uint64_t address = address_of(dev, buffers[i].buffer);
            memcpy(block + (size_t)json_num(json_get(p, "offset"), 0), &address, 8);
        }
    }
    size_t push_size = block_size;
    host_buffer args_buffer = {0};
    if (arg_buffer) {    /* the block lives in memory; its address is the only push constant */
        args_buffer = make_buffer(dev, block_size, 1);
        memcpy(args_buffer.mapped, block, block_size);
        uint64_t address = address_of(dev, args_buffer.buffer);
        memcpy(block, &address, 8);
        push_size = 8;
    }

    /* ---- pipeline: descriptor-set layout (descriptor ABI), push constants, specialization */
    VkDescriptorSetLayoutCreateInfo dslci = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
    dslci.bindingCount = nbind;
    dslci.pBindings = bindings;
    VkDescriptorSetLayout set_layout;
    check(vkCreateDescriptorSetLayout(dev, &dslci, NULL, &set_layout), "vkCreateDescriptorSetLayout");
    VkPushConstantRange range = {VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)push_size};
    VkPipelineLayoutCreateInfo plci = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
    plci.setLayoutCount = descriptors ? 1 : 0;
    plci.pSetLayouts = &set_layout;
    plci.pushConstantRangeCount = push_size ? 1 : 0;
    plci.pPushConstantRanges = &range;
    VkPipelineLayout layout;
    check(vkCreatePipelineLayout(dev, &plci, NULL, &layout), "vkCreatePipelineLayout");

    VkShaderModuleCreateInfo smci = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    smci.codeSize = spv_size;
    smci.pCode = (const uint32_t *)spv;
    VkShaderModule module;
    check(vkCreateShaderModule(dev, &smci, NULL, &module), "vkCreateShaderModule");
    VkSpecializationInfo spec = {(uint32_t)nspec, spec_entries, spec_size, spec_data};
    VkPipelineShaderStageRequiredSubgroupSizeCreateInfo subgroup = {
        VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_REQUIRED_SUBGROUP_SIZE_CREATE_INFO};
    subgroup.requiredSubgroupSize = (uint32_t)json_num(json_get(abi, "required_subgroup_size"), 0);
    VkComputePipelineCreateInfo cpci = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cpci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    cpci.stage.pNext = subgroup.requiredSubgroupSize && f13.subgroupSizeControl ? &subgroup : NULL;
    cpci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    cpci.stage.module = module;
    cpci.stage.pName = json_str(json_get(&meta, "entry_point"), "main");
    cpci.stage.pSpecializationInfo = nspec ? &spec : NULL;
    cpci.layout = layout;
    VkPipeline pipeline;
    check(vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &cpci, NULL, &pipeline), "vkCreateComputePipelines");

    VkDescriptorPool pool = VK_NULL_HANDLE;
    VkDescriptorSet set = VK_NULL_HANDLE;
    if (descriptors && nbind) {
        VkDescriptorPoolSize pool_size = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, nbind};
        VkDescriptorPoolCreateInfo dpci = {VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
        dpci.maxSets = 1;
        dpci.poolSizeCount = 1;
        dpci.pPoolSizes = &pool_size;
        check(vkCreateDescriptorPool(dev, &dpci, NULL, &pool), "vkCreateDescriptorPool");
        VkDescriptorSetAllocateInfo dsai = {VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
        dsai.descriptorPool = pool;
        dsai.descriptorSetCount = 1;
        dsai.pSetLayouts = &set_layout;
        check(vkAllocateDescriptorSets(dev, &dsai, &set), "vkAllocateDescriptorSets");
        for (size_t i = 0; i < params->count; i++) {
            const json *p = &params->items[i];
            if (strcmp(json_str(json_get(p, "kind"), ""), "buffer")) continue;
            VkDescriptorBufferInfo info = {buffers[i].buffer, 0, VK_WHOLE_SIZE};
            VkWriteDescriptorSet w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
            w.dstSet = set;
            w.dstBinding = (uint32_t)json_num(json_get(p, "binding"), 0);
            w.descriptorCount = 1;
            w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
            w.pBufferInfo = &info;
            vkUpdateDescriptorSets(dev, 1, &w, 0, NULL);
        }
    }

    /* ---- record, submit, wait */
    VkCommandPoolCreateInfo cpoolci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    VkCommandPool cpool;
    check(vkCreateCommandPool(dev, &cpoolci, NULL, &cpool), "vkCreateCommandPool");
    VkCommandBufferAllocateInfo cbai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cbai.commandPool = cpool;
    cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cbai.commandBufferCount = 1;
    VkCommandBuffer cmd;
    check(vkAllocateCommandBuffers(dev, &cbai, &cmd), "vkAllocateCommandBuffers");
    VkCommandBufferBeginInfo begin = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    check(vkBeginCommandBuffer(cmd, &begin), "vkBeginCommandBuffer");
    vkCmdBindPipeline(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
    if (set != VK_NULL_HANDLE)
        vkCmdBindDescriptorSets(cmd, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
    if (push_size)
        vkCmdPushConstants(cmd, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, (uint32_t)push_size, block);
    vkCmdDispatch(cmd, grid[0], grid[1], grid[2]);
    VkMemoryBarrier barrier = {VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0,
                         1, &barrier, 0, NULL, 0, NULL);
    check(vkEndCommandBuffer(cmd), "vkEndCommandBuffer");
    VkFenceCreateInfo fci = {VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    VkFence fence;
    check(vkCreateFence(dev, &fci, NULL, &fence), "vkCreateFence");
    VkSubmitInfo submit = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
    submit.commandBufferCount = 1;
    submit.pCommandBuffers = &cmd;
    check(vkQueueSubmit(queue, 1, &submit, fence), "vkQueueSubmit");
    check(vkWaitForFences(dev, 1, &fence, VK_TRUE, UINT64_C(60000000000)), "vkWaitForFences");

    /* ---- check the results */
    size_t bad = 0;
    for (size_t i = 0; i < params->count; i++) {
        if (!want_files[i]) continue;
        const json *p = &params->items[i];
        size_t size;
        char *want = read_file(want_files[i], &size);
        if (size != buffers[i].size) die("an expected file differs in size from its buffer");
        bad += compare(json_str(json_get(p, "name"), "?"), json_str(json_get(p, "dtype"), ""),
                       buffers[i].mapped, want, size);
        free(want);
    }

    vkDestroyFence(dev, fence, NULL);
    vkDestroyCommandPool(dev, cpool, NULL);
    if (pool != VK_NULL_HANDLE) vkDestroyDescriptorPool(dev, pool, NULL);
    vkDestroyPipeline(dev, pipeline, NULL);
    vkDestroyShaderModule(dev, module, NULL);
    vkDestroyPipelineLayout(dev, layout, NULL);
    vkDestroyDescriptorSetLayout(dev, set_layout, NULL);
    for (size_t i = 0; i < params->count; i++)
        if (buffers[i].buffer != VK_NULL_HANDLE) {
            vkDestroyBuffer(dev, buffers[i].buffer, NULL);
            vkFreeMemory(dev, buffers[i].memory, NULL);
        }
    if (arg_buffer) {
        vkDestroyBuffer(dev, args_buffer.buffer, NULL);
        vkFreeMemory(dev, args_buffer.memory, NULL);
    }
    vkDestroyDevice(dev, NULL);
    vkDestroyInstance(instance, NULL);
    if (bad) {
        printf("%zu mismatching element(s)\n", bad);
        return 1;
    }
    printf("ok\n");
    return 0;
}
