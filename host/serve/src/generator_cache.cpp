#include "generator_cache.hpp"

#include "memory_release.hpp"

#include <dlfcn.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <exception>
#include <thread>

#include <rudder/base/memory.hpp>
#include <rudder/nn/model_files.hpp>

namespace rudder::serve {
namespace {

// The largest batch of the generator's recipe within its memory limit now (the estimate counts what the process
// holds, and grows with the batch): found by bisection.
int64_t largest_fitting_batch(const Generator& generator) {
    int64_t low = 0, high = generator.recipe().batch_size;
    while (low < high) {
        const int64_t middle = (low + high + 1) / 2;
        if (generator.fits_memory_limit(middle))
            low = middle;
        else
            high = middle - 1;
    }
    return low;
}

// Bytes the process's allocator hands out now: what a generator's model and controllers take when it is built
// (a structured controller's token transitions, up to its max_table_bytes each) is the growth of this across the
// build. tcmalloc's count (the rudder command's allocator), else glibc's; the resident size where neither answers.
// Other threads' allocations in the meantime (a run's step, another load) count too: an estimate.
uint64_t allocated_heap_bytes() {
    using Get = int (*)(const char*, size_t*);
    static const Get get = reinterpret_cast<Get>(::dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty"));
    size_t value = 0;
    if (get != nullptr && get("generic.current_allocated_bytes", &value) != 0) return value;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
    const struct mallinfo2 info = ::mallinfo2();
    return info.uordblks + info.hblkhd;
#else
    return resident_bytes();
#endif
}

}  // namespace

std::optional<GeneratorCache::Known> GeneratorCache::known(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& [k, known] : known_) {
        if (k != key) continue;
        Known now = known;
        // A kept generator of the key tells what fits now, not when it was built.
        for (const Idle& idle : idle_)
            if (idle.key == key) {
                now.fitting_batch = largest_fitting_batch(*idle.generator);
                break;
            }
        return now;
    }
    return std::nullopt;
}

void GeneratorCache::remember(const std::string& key, const Generator& generator) {
    Known known;
    known.batching_pays = generator.batching_pays();
    known.batch_size = generator.recipe().batch_size;
    known.fitting_batch = largest_fitting_batch(generator);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = known_.begin(); it != known_.end(); ++it)
        if (it->first == key) {
            known_bytes_ -= it->first.size();
            known_.erase(it);
            break;
        }
    known_.emplace_front(key, known);
    known_bytes_ += key.size();
    while (known_.size() > 1 && (known_.size() > kKnownKeys || known_bytes_ > kKnownBytes)) {
        known_bytes_ -= known_.back().first.size();
        known_.pop_back();
    }
}

std::unique_ptr<Generator> GeneratorCache::take(const std::string& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
        if (it->key == key) {
            auto generator = std::move(it->generator);
            idle_bytes_ -= it->bytes;
            // Noted again while it runs, so that it counts when it comes back (a note of a gone generator at the
            // same address dropped first).
            take_noted(generator.get());
            noted_.emplace_back(generator.get(), it->bytes);
            if (noted_.size() > kNotedOutside) noted_.pop_front();
            idle_.erase(it);
            return generator;
        }
    return nullptr;
}

void GeneratorCache::note_bytes(const Generator& generator, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    take_noted(&generator);  // an address used before by a generator that is gone
    noted_.emplace_back(&generator, bytes);
    if (noted_.size() > kNotedOutside) noted_.pop_front();
}

uint64_t GeneratorCache::take_noted(const Generator* generator) {
    for (auto it = noted_.begin(); it != noted_.end(); ++it)
        if (it->first == generator) {
            const uint64_t bytes = it->second;
            noted_.erase(it);
            return bytes;
        }
    return 0;
}

uint64_t GeneratorCache::idle_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return idle_bytes_;
}

void GeneratorCache::give_back(const std::string& key, std::unique_ptr<Generator> generator) {
    std::vector<std::unique_ptr<Generator>> dropped;  // unloaded outside the lock
    std::lock_guard<std::mutex> lock(mutex_);
    const auto of_key = std::count_if(idle_.begin(), idle_.end(), [&](const Idle& idle) { return idle.key == key; });
    const uint64_t bytes = generator ? take_noted(generator.get()) : 0;
    if (generator && static_cast<size_t>(of_key) >= per_key_) {
        dropped.push_back(std::move(generator));
    } else if (generator) {
        idle_.push_front({key, std::move(generator), bytes});
        idle_bytes_ += bytes;
    }
    // Beyond the count or the bytes, the least recently used go; the one just given back stays, however large (its
    // recipe's next request, often soon, would load it again).
    while (idle_.size() > capacity_ || (max_bytes_ > 0 && idle_bytes_ > max_bytes_ && idle_.size() > 1)) {
        idle_bytes_ -= idle_.back().bytes;
        dropped.push_back(std::move(idle_.back().generator));
        idle_.pop_back();
    }
}

std::optional<Model> GeneratorCache::take_model(const std::function<bool(const Generator&)>& runs_it) {
    std::unique_ptr<Generator> dropped;  // unloaded outside the lock, its model kept
    {
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = idle_.rbegin(); it != idle_.rend(); ++it)
            if (runs_it(*it->generator)) {
                dropped = std::move(it->generator);
                idle_bytes_ -= it->bytes;
                idle_.erase(std::next(it).base());
                break;
            }
    }
    if (!dropped) return std::nullopt;
    Model model = dropped->model();  // the denoiser and tokenizer are shared pointers: now this copy's alone
    dropped.reset();
    return model;
}

Model GeneratorLoader::load_model_of(const Recipe& recipe, const std::filesystem::path& base_dir,
                                     std::vector<RecipeIssue>& issues) {
    try {
        const std::filesystem::path dir = catalog_.find(recipe.model, base_dir);
        // An idle generator's model when it is this one as this recipe runs it: the same folder and family, the
        // stored weights (int8 rewrites them in place) and the device (moved there in place).
        const auto runs_it = [&](const Generator& g) {
            return g.model().dir == dir && g.recipe().family == recipe.family && g.recipe().weights == "stored" &&
                   recipe.weights == "stored" && g.recipe().device == recipe.device;
        };
        if (std::optional<Model> kept = cache.take_model(runs_it)) {
            if (is_model_name(recipe.model)) kept->name = recipe.model;
            metrics_.models_reused.Increment();
            return std::move(*kept);
        }
        std::optional<Family> family;
        if (recipe.family) family = *recipe.family == "continuous" ? Family::continuous : Family::discrete;
        Model model = load_model(dir, family);
        // Named as the request names it (`--model NAME=PATH` may differ from the folder's name).
        if (is_model_name(recipe.model)) model.name = recipe.model;
        return model;
    } catch (const std::exception& e) {
        issues.push_back({"/model", e.what()});
        return Model();
    }
}

void GeneratorLoader::check_memory(const GenerateRequest& request, int64_t samples,
                                   const GeneratorCache::Known& known) const {
    const int64_t batch = std::min(samples, known.batch_size);
    if (batch <= known.fitting_batch) return;
    const uint64_t limit = limits_.max_memory_bytes > 0 ? limits_.max_memory_bytes : physical_memory_bytes();
    const std::string message =
        "a batch of " + std::to_string(batch) + " samples of this recipe is over this server's memory limit of " +
        memory_text(limit) + " for a request; " +
        (known.fitting_batch > 0
             ? "at most " + std::to_string(known.fitting_batch) + " run together here: ask for " +
                   "fewer samples, or give the recipe a batch_size of at most " + std::to_string(known.fitting_batch)
             : std::string("lower its max_length"));
    throw RequestError{400, "invalid request", {{request.samples_pointer, message}}};
}

std::unique_ptr<Generator> GeneratorLoader::load(const GenerateRequest& request, const std::string& key,
                                                 int64_t* samples, bool unless_known) {
    std::vector<RecipeIssue> issues;
    const auto prefixed = [&](std::vector<RecipeIssue> found) {
        for (auto& issue : found) issue.pointer = request.pointer_prefix + issue.pointer;
        return found;
    };
    try {
        // The request's recipe as it was parsed from the body (or the server's file), not printed and parsed again;
        // each controller's params in the order the client wrote them.
        Recipe recipe = parse_recipe_document(request.recipe, request.base_dir, limits_, &issues);
        *samples = recipe.samples;
        if (issues.empty()) {
            std::optional<GeneratorCache::Known> known = cache.known(key);
            if (known) {
                check_memory(request, recipe.samples, *known);
                if (unless_known) return nullptr;
            }
            if (auto cached = cache.take(key)) {
                if (!known) {  // kept longer than its key was remembered
                    cache.remember(key, *cached);
                    known = cache.known(key);
                    cache.give_back(key, std::move(cached));
                    if (known) check_memory(request, recipe.samples, *known);
                    cached = cache.take(key);
                }
                if (cached) return cached;
            }
        }
        const bool reported = std::any_of(issues.begin(), issues.end(), [](const RecipeIssue& i) {
            return i.pointer == "/model" || i.pointer == "/family";
        });
        const uint64_t before = allocated_heap_bytes();
        Model model = reported ? Model() : load_model_of(recipe, request.base_dir, issues);
        auto generator =
            std::make_unique<Generator>(std::move(recipe), std::move(model), registry_, catalog_.folders(), issues);
        const uint64_t after = allocated_heap_bytes();
        cache.note_bytes(*generator, after > before ? after - before : 0);
        metrics_.loads.Increment();
        cache.remember(key, *generator);
        return generator;
    } catch (const RecipeError& e) {
        throw RequestError{400, "invalid recipe", prefixed(e.issues())};
    }
}

GeneratorLoader::~GeneratorLoader() {
    {
        std::lock_guard<std::mutex> lock(loads_mutex_);
        stopping_ = true;
    }
    load_waiting_.notify_all();
    for (auto& thread : threads_) thread.join();
}

void GeneratorLoader::work() {
    std::unique_lock<std::mutex> lock(loads_mutex_);
    for (;;) {
        ++idle_threads_;
        load_waiting_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
        --idle_threads_;
        if (tasks_.empty()) return;
        std::function<void()> task = std::move(tasks_.front());
        tasks_.pop_front();
        lock.unlock();
        task();
        release_thread_cache();
        lock.lock();
        --loads_;
        metrics_.loading.Set(static_cast<double>(loads_));
        loads_ended_.notify_all();
    }
}

std::unique_ptr<Generator> GeneratorLoader::load_before(const GenerateRequest& request, const std::string& key,
                                                        int64_t* samples, bool unless_known,
                                                        std::chrono::steady_clock::time_point deadline) {
    struct Task {
        std::mutex mutex;
        std::condition_variable ended;
        bool done = false, abandoned = false;
        std::unique_ptr<Generator> generator;
        int64_t samples = 0;
        std::exception_ptr error;
    };
    auto task = std::make_shared<Task>();
    const auto load_task = [this, task, request, key, unless_known] {
        {
            std::lock_guard<std::mutex> lock(task->mutex);
            if (task->abandoned) return;  // its request left while it waited for a thread
        }
        std::unique_ptr<Generator> generator;
        int64_t n = 0;
        std::exception_ptr error;
        try {
            generator = load(request, key, &n, unless_known);
        } catch (...) {
            error = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> lock(task->mutex);
            task->done = true;
            if (!task->abandoned) {
                task->generator = std::move(generator);
                task->samples = n;
                task->error = error;
            }
        }
        task->ended.notify_all();
        if (generator) cache.give_back(key, std::move(generator));  // its request has left: kept for the next
    };
    {
        std::lock_guard<std::mutex> lock(loads_mutex_);
        ++loads_;
        metrics_.loading.Set(static_cast<double>(loads_));
        tasks_.push_back(load_task);
        if (idle_threads_ < tasks_.size() && threads_.size() < kMaxThreads) threads_.emplace_back([this] { work(); });
    }
    load_waiting_.notify_one();
    std::unique_lock<std::mutex> lock(task->mutex);
    if (!task->ended.wait_until(lock, deadline, [&] { return task->done; })) {
        task->abandoned = true;
        throw RequestError{504, "loading the recipe's model and plugins ran past the server's time limit", {}};
    }
    if (task->error) std::rethrow_exception(task->error);
    *samples = task->samples;
    return std::move(task->generator);
}

bool GeneratorLoader::wait_for_loads(std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(loads_mutex_);
    return loads_ended_.wait_for(lock, wait, [&] { return loads_ == 0; });
}

}  // namespace rudder::serve
