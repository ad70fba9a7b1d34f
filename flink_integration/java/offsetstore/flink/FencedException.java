package offsetstore.flink;

import org.apache.flink.runtime.throwable.ThrowableAnnotation;
import org.apache.flink.runtime.throwable.ThrowableType;

/**
 * The store refused the sink's generation (SQLSTATE OS001): another attempt of the job joined the
 * group, or an operator reset it. Nothing of the flush was written.
 *
 * <p>Not recoverable: Flink does not restart the job, since a restart from its checkpoint would keep
 * the old generation and the checkpoint's positions, past what a reset asks to read again. Start the
 * job anew; without a checkpoint, {@link StoreOffsetsInitializer} starts it at the store's positions.
 */
@ThrowableAnnotation(ThrowableType.NonRecoverableError)
public final class FencedException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public FencedException(String message, Throwable cause) {
        super(message, cause);
    }
}
